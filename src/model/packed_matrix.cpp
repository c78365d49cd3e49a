#include "pagedkv/model/packed_matrix.h"

#include <algorithm>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"

namespace pagedkv {

namespace {

constexpr int kP = PackedMatrix::kPanelRows;

// Accumulates an NT-token x NP-panel tile: for each input column j in order, every accumulator
// acc[t][p][l] (output row p * kP + l of token t) adds W[row][j] * x[t][j]. The innermost loop
// over l is the vector lane; NT * NP * kP floats of accumulators stay in registers.
template <int NT, int NP>
inline void tile_kernel(const float* panels, size_t panel_stride, int cols, const float* x, size_t x_stride,
                        float* y, size_t y_stride, int rows_left) {
  float acc[NT][NP][kP] = {};
  for (int j = 0; j < cols; ++j) {
    float xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = x[static_cast<size_t>(t) * x_stride + static_cast<size_t>(j)];
    for (int p = 0; p < NP; ++p) {
      const float* w = panels + static_cast<size_t>(p) * panel_stride + static_cast<size_t>(j) * kP;
      for (int t = 0; t < NT; ++t)
        for (int l = 0; l < kP; ++l) acc[t][p][l] += w[l] * xv[t];
    }
  }
  for (int t = 0; t < NT; ++t) {
    float* yt = y + static_cast<size_t>(t) * y_stride;
    for (int p = 0; p < NP; ++p) {
      const int n = std::min(kP, rows_left - p * kP);
      for (int l = 0; l < n; ++l) yt[p * kP + l] = acc[t][p][l];
    }
  }
}

// Token tiles of 4 share each loaded weight column across 4 tokens; a lone token instead walks 4
// panels at once so it still has 8 independent accumulator vectors to hide add latency.
void multiply_tile(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x,
                   size_t x_stride, int num_tokens, float* y, size_t y_stride, int rows) {
  int t = 0;
  for (; t + 4 <= num_tokens; t += 4) {
    const float* xt = x + static_cast<size_t>(t) * x_stride;
    float* yt = y + static_cast<size_t>(t) * y_stride;
    for (int p = 0; p < num_panels; ++p)
      tile_kernel<4, 1>(panels + static_cast<size_t>(p) * panel_stride, panel_stride, cols, xt, x_stride,
                        yt + p * kP, y_stride, rows - p * kP);
  }
  for (; t < num_tokens; ++t) {
    const float* xt = x + static_cast<size_t>(t) * x_stride;
    float* yt = y + static_cast<size_t>(t) * y_stride;
    int p = 0;
    for (; p + 4 <= num_panels; p += 4)
      tile_kernel<1, 4>(panels + static_cast<size_t>(p) * panel_stride, panel_stride, cols, xt, x_stride,
                        yt + p * kP, y_stride, rows - p * kP);
    for (; p < num_panels; ++p)
      tile_kernel<1, 1>(panels + static_cast<size_t>(p) * panel_stride, panel_stride, cols, xt, x_stride,
                        yt + p * kP, y_stride, rows - p * kP);
  }
}

}  // namespace

PackedMatrix::PackedMatrix(const float* w, int rows, int cols) : PackedMatrix({w}, {rows}, cols) {}

PackedMatrix::PackedMatrix(std::initializer_list<const float*> parts, std::initializer_list<int> part_rows,
                           int cols)
    : cols_(cols) {
  if (parts.size() != part_rows.size() || parts.size() == 0)
    throw UsageError("PackedMatrix: one row count per part is required");
  if (cols <= 0) throw UsageError(fmt::format("PackedMatrix: cols must be positive, got {}", cols));
  for (int r : part_rows) {
    if (r <= 0) throw UsageError(fmt::format("PackedMatrix: part rows must be positive, got {}", r));
    rows_ += r;
  }
  num_panels_ = (rows_ + kP - 1) / kP;
  const size_t c = static_cast<size_t>(cols);
  packed_.assign(static_cast<size_t>(num_panels_) * c * kP, 0.0f);
  int row = 0;
  auto rows_it = part_rows.begin();
  for (const float* part : parts) {
    for (int r = 0; r < *rows_it; ++r, ++row) {
      const float* src = part + static_cast<size_t>(r) * c;
      float* dst = packed_.data() + static_cast<size_t>(row / kP) * c * kP + static_cast<size_t>(row % kP);
      for (size_t j = 0; j < c; ++j) dst[j * kP] = src[j];
    }
    ++rows_it;
  }
}

void PackedMatrix::multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride) const {
  if (num_tokens <= 0) return;
  const size_t panel_stride = static_cast<size_t>(cols_) * kP;
  // Tiles: blocks of kTokenBlock tokens x groups of kPanelGroup panels. Small products run on the
  // calling thread: waking the team costs more than a few tens of thousands of multiply-adds.
  constexpr int kTokenBlock = 16;
  constexpr int kPanelGroup = 4;
  const int token_blocks = (num_tokens + kTokenBlock - 1) / kTokenBlock;
  const int panel_groups = (num_panels_ + kPanelGroup - 1) / kPanelGroup;
  const int tiles = token_blocks * panel_groups;
  const double macs = static_cast<double>(num_tokens) * rows_ * cols_;
  const bool parallel = tiles > 1 && macs >= 65536.0;
#pragma omp parallel for schedule(static) if (parallel) num_threads(kernel_threads())
  for (int tile = 0; tile < tiles; ++tile) {
    const int tb = tile / panel_groups, pg = tile % panel_groups;
    const int t0 = tb * kTokenBlock, nt = std::min(kTokenBlock, num_tokens - t0);
    const int p0 = pg * kPanelGroup, np = std::min(kPanelGroup, num_panels_ - p0);
    multiply_tile(packed_.data() + static_cast<size_t>(p0) * panel_stride, panel_stride, np, cols_,
                  x + static_cast<size_t>(t0) * x_stride, x_stride, nt, y + static_cast<size_t>(t0) * y_stride
                  + static_cast<size_t>(p0) * kP, y_stride, rows_ - p0 * kP);
  }
}

}  // namespace pagedkv
