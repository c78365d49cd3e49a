// The per-ISA dot products of QuantizedMatrix, private to src/model: one row of weights in its
// stored type against one activation row (f32 for F16/BF16, Q8_0 blocks for Q8_0/Q4_0).
#pragma once

#include <cstdint>

#include "pagedkv/model/tensor_type.h"

namespace pagedkv::quant_detail {

struct DotKernels {
  float (*f16)(const uint16_t* w, const float* x, int n);
  float (*bf16)(const uint16_t* w, const float* x, int n);
  float (*q8_0)(const BlockQ8_0* w, const BlockQ8_0* x, int blocks);
  float (*q4_0)(const BlockQ4_0* w, const BlockQ8_0* x, int blocks);
};

const DotKernels& scalar_dot_kernels();
const DotKernels& avx2_dot_kernels();  // only after a run-time AVX2+FMA+F16C check

}  // namespace pagedkv::quant_detail
