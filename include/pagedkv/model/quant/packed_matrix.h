// Batched y = x · Wᵀ for a fp32 weight matrix W [rows][cols] (llama2.c's [out][in] layout) and a
// batch of activation rows x [num_tokens][cols] — the linear layers of the model runner.
//
// W is repacked once into panels of kPanelRows consecutive output rows, stored column by column
// ([panel][col][kPanelRows]), so one input column of a panel is a contiguous run of floats. The
// kernel keeps a small tile of tokens x panels of accumulators in registers and, for each input
// column j in order, adds W[r][j] * x[t][j] to every accumulator: SIMD lanes run across output
// rows (GNU vector types, no intrinsics: 4 lanes in the baseline build, 8 in the AVX2 and AVX-512
// builds chosen at run time; the AVX-512 one tiles 8 tokens in its 32 registers), while each output is still the
// left-to-right float sum over j, rounded after every multiply and add, that llama2.c's matmul computes. Results are
// therefore bit-identical to run.c's matmul whatever the batch size, thread count or ISA.
//
// Work is split over OpenMP threads by (token block, panel) tiles once the product is large
// enough to pay for waking them.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "pagedkv/storage/cpu_isa.h"

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
  // `isa` picks the tile build (kAuto: the best this CPU runs; see storage/cpu_isa.h).
  void multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride,
                KernelIsa isa = KernelIsa::kAuto) const;

 private:
  int rows_ = 0;
  int cols_ = 0;
  int num_panels_ = 0;
  std::vector<float> packed_;  // [num_panels][cols][kPanelRows]
};

}  // namespace pagedkv
