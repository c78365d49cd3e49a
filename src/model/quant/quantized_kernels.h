// The per-ISA builds of QuantizedMatrix's product, private to src/model. A build computes a
// group of weight rows against every token of the batch; the register-blocked builds (AVX2 on the
// file's Q8_0 rows, AVX-512, and AVX2 for the other types, on the repacked panels of
// quantized_panels.h) read each weight row once per group of tokens and keep several rows x
// tokens of accumulators in registers, so a batch costs little more weight traffic than one token.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedkv/model/format/tensor_type.h"
#include "quantized_panels.h"

namespace pagedkv::quant_detail {

// Rows of one weight matrix in its stored type.
struct WeightRows {
  TensorType type;
  const std::byte* base;  // row r starts at base + r * row_bytes
  size_t row_bytes;
  int cols;
};

// The activations as a build reads them: for F16/BF16 weights the f32 rows themselves; for
// Q8_0/Q4_0 weights each row quantized to Q8_0 (quantize_row_q8_0) and stored in the build's
// own encoding by its `prepare`.
struct Activations {
  const std::byte* data;
  size_t stride;  // bytes from one token to the next
  int num_tokens;
};

struct RowsKernel {
  // Bytes one token's prepared Q8_0 activations take for `cols` columns (a multiple of 32).
  size_t (*prepared_bytes)(int cols);
  // Quantizes one token's f32 row to Q8_0 and stores it in this build's encoding.
  void (*prepare)(const float* x, int cols, std::byte* out);
  // y[t * y_stride + r] for r in [r0, r1) and every token.
  void (*multiply_rows)(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride);
};

// A build that reads the weights repacked in panels of 16 rows (quantized_panels.h). It prepares
// every weight type's activations (F16/BF16: the f32 values reordered, Q8_0/Q4_0: quantized), in
// its own layout of the whole batch.
struct PanelsKernel {
  // Bytes the prepared activations of `num_tokens` tokens take for a `type` matrix of `cols` columns.
  size_t (*prepared_bytes)(TensorType type, int cols, int num_tokens);
  void (*prepare)(TensorType type, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out);
  // y[t * y_stride + r] for the rows of panels [p0, p1) (real rows only) and every token;
  // x.data is what `prepare` wrote (x.stride unused).
  void (*multiply_panels)(const WeightPanels& w, int p0, int p1, const Activations& x, float* y, size_t y_stride);
};

const RowsKernel& scalar_rows_kernel();
const RowsKernel& avx2_rows_kernel();  // Q8_0; only after a run-time AVX2+FMA+F16C check
const PanelsKernel& avx512_panels_kernel();  // only after a run-time AVX-512 F/VL/BW/DQ + VNNI check
// The same for Q4_K / Q5_K / Q6_K / IQ4_XS panels (kquant_kernels_avx512.cpp): activations quantized to
// Q8_K, results equal to the scalar twin's block_dot bit for bit.
const PanelsKernel& avx512_k_quant_panels_kernel();  // only after the same check
// The same for Q3_K / Q2_K panels (low_bit_kernels_avx512.cpp): activations quantized to Q8_K by
// the twin's quantizer, results equal to its block_dot's. (IQ4_NL panels: avx512_panels_kernel.)
const PanelsKernel& avx512_low_bit_panels_kernel();  // only after the same check
// The K-quant and IQ4_XS panels without VNNI (kquant_kernels_avx2.cpp): the same results as the
// AVX-512 build's, for CPUs with AVX2 but not AVX-512 VNNI.
const PanelsKernel& avx2_k_quant_panels_kernel();  // only after a run-time AVX2+FMA+F16C check
// The F16 / BF16 panels without AVX-512 (float_panels_avx2.cpp): f32 activations, the same results
// as the AVX-512 build's bit for bit (one FMA per column, in column order).
const PanelsKernel& avx2_float_panels_kernel();  // only after the same check

// Q4_0 panels without AVX-512 VNNI (quantized_kernels_avx2.cpp): the activations quantized to Q8_0
// with each block's sum, token after token; the scalar twin's results (and the AVX-512 build's),
// bit for bit.
const PanelsKernel& avx2_q4_0_panels_kernel();  // only after a run-time AVX2+FMA+F16C check

// BF16 panels multiplied with vdpbf16ps on activations rounded to BF16 (bf16_pair_kernels_avx512.cpp),
// where bf16_products() says kPairs: only after the AVX-512 + VNNI check and one for AVX512-BF16.
const PanelsKernel& avx512_bf16_pair_panels_kernel();

// Which build multiplies a type's repacked panels for a requested ISA (quantized_matrix.cpp).
enum class PanelBuild { kNone, kAvx512, kAvx2 };

}  // namespace pagedkv::quant_detail
