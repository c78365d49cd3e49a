#include "pagedkv/model/quantized_matrix.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/storage/float_convert.h"
#include "quantized_dot.h"

namespace pagedkv {

namespace quant_detail {
namespace {

// The portable twins: the same arithmetic as the SIMD builds, summed left to right.
float dot_f16(const uint16_t* w, const float* x, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += f16_to_f32(w[i]) * x[i];
  return acc;
}

float dot_bf16(const uint16_t* w, const float* x, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += bf16_to_f32(w[i]) * x[i];
  return acc;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int blocks) {
  float acc = 0.0f;
  for (int b = 0; b < blocks; ++b) {
    int sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) sum += w[b].q[j] * x[b].q[j];
    acc += static_cast<float>(sum) * (f16_to_f32(w[b].d) * f16_to_f32(x[b].d));
  }
  return acc;
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int blocks) {
  float acc = 0.0f;
  for (int b = 0; b < blocks; ++b) {
    int sum = 0;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      sum += ((w[b].q[j] & 0x0F) - 8) * x[b].q[j];
      sum += ((w[b].q[j] >> 4) - 8) * x[b].q[j + kQuantBlock / 2];
    }
    acc += static_cast<float>(sum) * (f16_to_f32(w[b].d) * f16_to_f32(x[b].d));
  }
  return acc;
}

}  // namespace

const DotKernels& scalar_dot_kernels() {
  static const DotKernels k{dot_f16, dot_bf16, dot_q8_0, dot_q4_0};
  return k;
}

}  // namespace quant_detail

QuantizedMatrix::QuantizedMatrix(const WeightTensor& w) : w_(w) {
  if (w.type != TensorType::kF16 && w.type != TensorType::kBF16 && w.type != TensorType::kQ8_0 &&
      w.type != TensorType::kQ4_0)
    throw UsageError(fmt::format("QuantizedMatrix: {} weights are not supported", tensor_type_name(w.type)));
  if (w.rows <= 0 || w.cols <= 0 || w.rows > INT32_MAX || w.cols > INT32_MAX || w.data == nullptr)
    throw UsageError(fmt::format("QuantizedMatrix: bad shape {} x {}", w.rows, w.cols));
}

void QuantizedMatrix::multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride,
                               KernelIsa isa) const {
  if (num_tokens <= 0) return;
  const quant_detail::DotKernels& k =
      has_avx2(resolve_isa(isa)) ? quant_detail::avx2_dot_kernels() : quant_detail::scalar_dot_kernels();
  const int rows = this->rows(), cols = this->cols();
  const size_t row_bytes = tensor_row_bytes(w_.type, cols);
  const auto* base = static_cast<const char*>(w_.data);
  const bool quantized = w_.type == TensorType::kQ8_0 || w_.type == TensorType::kQ4_0;
  const int blocks = cols / kQuantBlock;

  // Quantized weights multiply Q8_0 activations: quantize every token row once.
  thread_local std::vector<BlockQ8_0> xq;
  if (quantized) {
    xq.resize(static_cast<size_t>(num_tokens) * static_cast<size_t>(blocks));
    for (int t = 0; t < num_tokens; ++t)
      quantize_row_q8_0({x + static_cast<size_t>(t) * x_stride, static_cast<size_t>(cols)},
                        xq.data() + static_cast<size_t>(t) * static_cast<size_t>(blocks));
  }
  const BlockQ8_0* xq_data = xq.data();

  // Groups of rows, each row's weights read once from memory and reused from L1 for every token.
  constexpr int kRowGroup = 16;
  const int groups = (rows + kRowGroup - 1) / kRowGroup;
  const double macs = static_cast<double>(num_tokens) * rows * cols;
  const bool parallel = groups > 1 && macs >= kMinParallelMultiplyAdds;
#pragma omp parallel for schedule(static) if (parallel) num_threads(kernel_threads())
  for (int g = 0; g < groups; ++g) {
    const int r_end = std::min(rows, (g + 1) * kRowGroup);
    for (int r = g * kRowGroup; r < r_end; ++r) {
      const void* wr = base + static_cast<size_t>(r) * row_bytes;
      for (int t = 0; t < num_tokens; ++t) {
        float v = 0.0f;
        switch (w_.type) {
          case TensorType::kF16: v = k.f16(static_cast<const uint16_t*>(wr), x + static_cast<size_t>(t) * x_stride, cols); break;
          case TensorType::kBF16: v = k.bf16(static_cast<const uint16_t*>(wr), x + static_cast<size_t>(t) * x_stride, cols); break;
          case TensorType::kQ8_0:
            v = k.q8_0(static_cast<const BlockQ8_0*>(wr), xq_data + static_cast<size_t>(t) * static_cast<size_t>(blocks), blocks);
            break;
          default:
            v = k.q4_0(static_cast<const BlockQ4_0*>(wr), xq_data + static_cast<size_t>(t) * static_cast<size_t>(blocks), blocks);
            break;
        }
        y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)] = v;
      }
    }
  }
}

}  // namespace pagedkv
