// Products of one weight row in a block format of block_formats.h (Q4_1, Q5_0, Q5_1, Q2_K..Q6_K,
// IQ4_NL, IQ4_XS) with one activation row, as llama.cpp's CPU back end computes them; private to
// src/model/quant.
//
// The activation row is first quantized to the weight type's activation format (ggml's
// vec_dot_type): Q8_0 for Q5_0 and IQ4_NL, Q8_1 for Q4_1 and Q5_1, Q8_K for the K-quants and
// IQ4_XS. Inside a block the products are exact integer sums (weighted by the integer sub-block
// scales); a block contributes d_w * d_x * sum, minus d_min * d_x * (the mins against the 16-value
// activation sums) for the types with mins (Q2_K, Q4_K, Q5_K), plus m * s for Q4_1 / Q5_1. The
// blocks' contributions are added in float in block order: the scalar reference the SIMD builds
// are compared against.
#pragma once

#include <cstddef>

#include "pagedkv/model/format/tensor_type.h"

namespace pagedkv::quant_detail {

// True for the weight types this header computes with.
bool is_block_format(TensorType weight);
// ggml's vec_dot_type of `weight`: kQ8_0, kQ8_1 or kQ8_K.
TensorType activation_type(TensorType weight);
// Bytes of one token's quantized activations for a `weight` matrix of `cols` columns.
size_t activation_row_bytes(TensorType weight, int cols);
// Quantizes one token's f32 row for a `weight` matrix.
void quantize_activations(TensorType weight, const float* x, int cols, std::byte* out);
// The dot product of a weight row with quantized activations (`cols` values).
float block_dot(TensorType weight, const std::byte* w_row, const std::byte* x_row, int cols);

// A build of the products over rows [r0, r1) of a matrix (row r at w + r * row_bytes) and every
// token's quantized activations (token t at acts + t * act_stride): y[t * y_stride + r].
struct BlockRowsKernel {
  void (*multiply_rows)(TensorType type, const std::byte* w, size_t row_bytes, int cols, int r0, int r1,
                        const std::byte* acts, size_t act_stride, int num_tokens, float* y, size_t y_stride);
};
const BlockRowsKernel& scalar_block_kernel();
const BlockRowsKernel& avx2_block_kernel();  // only after a run-time AVX2+FMA+F16C check
const BlockRowsKernel& avx512_block_kernel();  // only after a run-time AVX-512 F/VL/BW/DQ + VNNI check

}  // namespace pagedkv::quant_detail
