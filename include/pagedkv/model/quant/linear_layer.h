// One linear layer of the model runner: y = [W0; W1; ...] x (+ [b0; b1; ...]) over weights of any
// runnable type, so that q, k and v (or gate and up) come out of one call.
//
// When every part is F32 the parts are packed together into one PackedMatrix, whose results are
// bit-identical to llama2.c's matmul (the llama2.c goldens depend on it). Otherwise each part
// multiplies on its own: F32 parts packed, the others read in place (QuantizedMatrix), where
// consecutive parts of one type share the activations the first of them prepared (quantized, or
// reordered for the AVX-512 panels), all of them in one parallel region. Biases (f32) are added
// after the product, as llama.cpp adds them.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <vector>

#include "pagedkv/model/quant/packed_matrix.h"
#include "pagedkv/model/quant/quantized_matrix.h"
#include "pagedkv/model/transformer_weights.h"

namespace pagedkv {

class LinearLayer {
 public:
  LinearLayer() = default;
  // Parts with equal column counts; `biases` empty or one per part (absent entries: no bias).
  // Throws UsageError for mismatched shapes or a type that is not runnable.
  explicit LinearLayer(std::initializer_list<WeightTensor> parts, std::initializer_list<WeightTensor> biases = {});

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  // Bytes this layer owns (packed F32 copies) plus those it reads in place.
  size_t bytes() const;

  // y[t * y_stride + r] for t < num_tokens, r < rows(); x and y must not overlap. The quantized
  // parts run in one parallel region (QuantizedMatrix::multiply_all).
  void multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride,
                KernelIsa isa = KernelIsa::kAuto) const;

  // One product of multiply_all(), with multiply()'s arguments.
  struct Call {
    const LinearLayer* layer;
    const float* x;
    size_t x_stride;
    int num_tokens;
    float* y;
    size_t y_stride;
  };
  // Several layers' products, every quantized part of every call in one parallel region (the
  // experts a mixture of experts runs in one step); each y is what multiply() gives, bit for bit.
  static void multiply_all(std::span<const Call> calls, KernelIsa isa = KernelIsa::kAuto);

 private:
  struct Part {
    int row_offset = 0;
    bool packed = false;
    PackedMatrix f32;
    QuantizedMatrix quantized;
  };
  int rows_ = 0;
  int cols_ = 0;
  std::vector<Part> parts_;
  std::vector<float> bias_;  // [rows_], or empty
};

}  // namespace pagedkv
