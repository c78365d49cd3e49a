#include "pagedkv/model/quant/linear_layer.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

LinearLayer::LinearLayer(std::initializer_list<WeightTensor> parts, std::initializer_list<WeightTensor> biases) {
  if (parts.size() == 0) throw UsageError("LinearLayer: no weights");
  if (biases.size() != 0 && biases.size() != parts.size())
    throw UsageError("LinearLayer: one bias (present or absent) per part is required");
  cols_ = static_cast<int>(parts.begin()->cols);
  bool all_f32 = true;
  for (const WeightTensor& w : parts) {
    if (!w.present() || w.cols != cols_ || w.rows <= 0 || w.rows > INT32_MAX - rows_)
      throw UsageError(fmt::format("LinearLayer: part of {} x {} does not fit {} columns", w.rows, w.cols, cols_));
    if (!is_runnable_weight_type(w.type))
      throw UsageError(fmt::format("LinearLayer: {} weights are not supported", tensor_type_name(w.type)));
    all_f32 = all_f32 && w.type == TensorType::kF32;
    rows_ += static_cast<int>(w.rows);
  }
  if (all_f32) {
    // One packed matrix over all parts: the llama2.c path, bit-identical to run.c's matmul.
    std::vector<const float*> ptrs;
    std::vector<int> rows;
    Part p;
    p.packed = true;
    if (parts.size() == 1) {
      p.f32 = PackedMatrix(parts.begin()->f32(), rows_, cols_);
    } else if (parts.size() == 2) {
      auto it = parts.begin();
      const WeightTensor &a = it[0], &b = it[1];
      p.f32 = PackedMatrix({a.f32(), b.f32()}, {static_cast<int>(a.rows), static_cast<int>(b.rows)}, cols_);
    } else if (parts.size() == 3) {
      auto it = parts.begin();
      const WeightTensor &a = it[0], &b = it[1], &c = it[2];
      p.f32 = PackedMatrix({a.f32(), b.f32(), c.f32()},
                           {static_cast<int>(a.rows), static_cast<int>(b.rows), static_cast<int>(c.rows)}, cols_);
    } else {
      throw UsageError("LinearLayer: at most three F32 parts");
    }
    parts_.push_back(std::move(p));
  } else {
    int offset = 0;
    for (const WeightTensor& w : parts) {
      Part p;
      p.row_offset = offset;
      p.packed = w.type == TensorType::kF32;
      if (p.packed) p.f32 = PackedMatrix(w.f32(), static_cast<int>(w.rows), cols_);
      else p.quantized = QuantizedMatrix(w);
      parts_.push_back(std::move(p));
      offset += static_cast<int>(w.rows);
    }
  }
  bool any_bias = false;
  for (const WeightTensor& b : biases) any_bias = any_bias || b.present();
  if (any_bias) {
    bias_.assign(static_cast<size_t>(rows_), 0.0f);
    auto w = parts.begin();
    size_t offset = 0;
    for (const WeightTensor& b : biases) {
      if (b.present()) {
        if (b.type != TensorType::kF32 || b.rows * b.cols != w->rows)
          throw UsageError(fmt::format("LinearLayer: a bias must be {} f32 values", w->rows));
        std::copy(b.f32(), b.f32() + w->rows, bias_.begin() + static_cast<std::ptrdiff_t>(offset));
      }
      offset += static_cast<size_t>(w->rows);
      ++w;
    }
  }
}

size_t LinearLayer::bytes() const {
  size_t n = bias_.size() * sizeof(float);
  for (const Part& p : parts_) n += p.packed ? p.f32.bytes() : p.quantized.bytes();
  return n;
}

void LinearLayer::multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride,
                           KernelIsa isa) const {
  const Call call{this, x, x_stride, num_tokens, y, y_stride};
  multiply_all({&call, 1}, isa);
}

void LinearLayer::multiply_all(std::span<const Call> calls, KernelIsa isa) {
  // Parts of one type read the same prepared activations: prepared by the first, reused by the
  // parts after it. One slot per preparation, sized before any is taken (a slot must not move).
  thread_local std::vector<QuantizedMatrix::Prepared> prepared;
  thread_local std::vector<QuantizedMatrix::Product> products;
  size_t slots = 0;
  for (const Call& c : calls) slots += c.layer->parts_.size();
  if (prepared.size() < slots) prepared.resize(slots);
  products.clear();
  size_t next = 0;
  for (const Call& c : calls) {
    if (c.num_tokens <= 0) continue;
    const QuantizedMatrix::Prepared* shared = nullptr;
    for (const Part& p : c.layer->parts_) {
      float* out = c.y + p.row_offset;
      if (p.packed) {
        p.f32.multiply(c.x, c.x_stride, c.num_tokens, out, c.y_stride, isa);
        continue;
      }
      if (shared == nullptr || !p.quantized.reads(*shared, isa)) {
        QuantizedMatrix::Prepared& slot = prepared[next++];
        p.quantized.prepare(c.x, c.x_stride, c.num_tokens, slot, isa);
        shared = &slot;
      }
      products.push_back({&p.quantized, shared, out, c.y_stride});
    }
  }
  // Every quantized part of every call in one parallel region.
  QuantizedMatrix::multiply_all(products);
  // A long prompt's wave of experts can take a slot per expert, each as large as its tokens'
  // activations: past kKeptSlots they are not kept from one call to the next.
  constexpr size_t kKeptSlots = 16;
  if (prepared.size() > kKeptSlots) prepared.resize(kKeptSlots);
  for (const Call& c : calls) {
    const LinearLayer& layer = *c.layer;
    if (layer.bias_.empty()) continue;
    for (int t = 0; t < c.num_tokens; ++t) {
      float* yt = c.y + static_cast<size_t>(t) * c.y_stride;
      for (int r = 0; r < layer.rows_; ++r) yt[r] += layer.bias_[static_cast<size_t>(r)];
    }
  }
}

}  // namespace pagedkv
