// Batched y = x · Wᵀ for a fp32 weight matrix W [rows][cols] (llama2.c's [out][in] layout) and a
// batch of activation rows x [num_tokens][cols] — the linear layers of the model runner.
//
// W is repacked once into panels of kPanelRows consecutive output rows, stored column by column
// ([panel][col][kPanelRows]), so one input column of a panel is a contiguous run of floats. The
// kernel keeps a small tile of tokens x panels of accumulators in registers and, for each input
// column j in order, adds W[r][j] * x[t][j] to every accumulator: the compiler vectorises across
// output rows (plain C++, baseline SSE2), while each output is still the left-to-right float sum
// over j that llama2.c's matmul computes. Results are therefore bit-identical to run.c's matmul
// (no FMA contraction: ISO C++ mode and baseline x86-64), whatever the batch size or thread count.
//
// Work is split over OpenMP threads by (token block, panel) tiles once the product is large
// enough to pay for waking them.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

namespace pagedkv {

class PackedMatrix {
 public:
  static constexpr int kPanelRows = 8;

  PackedMatrix() = default;
  // Packs W [rows][cols] (row-major, cols contiguous). Rows past `rows` in the last panel are 0.
  PackedMatrix(const float* w, int rows, int cols);
  // Packs the row-wise concatenation of several matrices with the same number of columns
  // ([W0; W1; ...]), so one multiply computes, say, q, k and v together.
  PackedMatrix(std::initializer_list<const float*> parts, std::initializer_list<int> part_rows, int cols);

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  size_t bytes() const { return packed_.size() * sizeof(float); }

  // y[t * y_stride + r] = sum_{j = 0 .. cols-1, in order} W[r][j] * x[t * x_stride + j]
  // for t < num_tokens, r < rows. x and y must not overlap.
  void multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride) const;

 private:
  int rows_ = 0;
  int cols_ = 0;
  int num_panels_ = 0;
  std::vector<float> packed_;  // [num_panels][cols][kPanelRows]
};

}  // namespace pagedkv
