#include "pagedkv/model/quant/packed_matrix.h"

#include <algorithm>

#include <fmt/format.h>

#include "packed_kernel.h"
#include "packed_tiles.h"
#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"

namespace pagedkv {

namespace {

constexpr int kP = PackedMatrix::kPanelRows;
static_assert(kP == kPanel);

}  // namespace

namespace packed_detail {

// 4 tokens x 1 panel = 8 accumulators of 4 floats, plus 2 weight vectors and a broadcast: 11 of
// the 16 xmm registers.
void multiply_tiles_sse(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x,
                        size_t x_stride, int num_tokens, float* y, size_t y_stride, int rows) {
  PackedKernel<4>::run<4, 1, 4>(panels, panel_stride, num_panels, cols, x, x_stride, num_tokens, y, y_stride, rows);
}

}  // namespace packed_detail

PackedMatrix::PackedMatrix(const float* w, int rows, int cols) : PackedMatrix({w}, {rows}, cols) {}

PackedMatrix::PackedMatrix(std::initializer_list<const float*> parts, std::initializer_list<int> part_rows, int cols)
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

void PackedMatrix::multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride,
                            KernelIsa isa) const {
  if (num_tokens <= 0) return;
  const KernelIsa resolved = resolve_isa(isa);
  const auto tiles_fn = resolved == KernelIsa::kAvx512 ? &packed_detail::multiply_tiles_avx512
                        : has_avx2(resolved)           ? &packed_detail::multiply_tiles_avx2
                                                       : &packed_detail::multiply_tiles_sse;
  const size_t panel_stride = static_cast<size_t>(cols_) * kP;
  // Tiles: blocks of kTokenBlock tokens x groups of kPanelGroup panels. Small products run on the
  // calling thread: waking the team costs more than they take (kernels/thread_pool.h).
  constexpr int kTokenBlock = 16;
  constexpr int kPanelGroup = 4;
  const int token_blocks = (num_tokens + kTokenBlock - 1) / kTokenBlock;
  const int panel_groups = (num_panels_ + kPanelGroup - 1) / kPanelGroup;
  const int tiles = token_blocks * panel_groups;
  const double macs = static_cast<double>(num_tokens) * rows_ * cols_;
  const bool parallel = tiles > 1 && macs >= kMinParallelMultiplyAdds;
#pragma omp parallel for schedule(static) if (parallel) num_threads(kernel_threads())
  for (int tile = 0; tile < tiles; ++tile) {
    const int tb = tile / panel_groups, pg = tile % panel_groups;
    const int t0 = tb * kTokenBlock, nt = std::min(kTokenBlock, num_tokens - t0);
    const int p0 = pg * kPanelGroup, np = std::min(kPanelGroup, num_panels_ - p0);
    tiles_fn(packed_.data() + static_cast<size_t>(p0) * panel_stride, panel_stride, np, cols_,
             x + static_cast<size_t>(t0) * x_stride, x_stride, nt,
             y + static_cast<size_t>(t0) * y_stride + static_cast<size_t>(p0) * kP, y_stride, rows_ - p0 * kP);
  }
}

}  // namespace pagedkv
