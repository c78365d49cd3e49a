// The register-blocked loop of the AVX2 build of QuantizedMatrix (quantized_kernels_avx2.cpp),
// which reads the file's rows in place (the AVX-512 build reads repacked panels instead); everything
// has internal linkage, so it never merges with code built for another ISA at link time.
//
// A tile is kRows weight rows x up to kTokens tokens: every weight vector loaded (and widened or
// unpacked) once serves kTokens tokens, and every activation vector kRows rows. Rows of a tile
// stay in L1 while the tile walks over the batch's token groups, so each weight byte comes from
// memory once per group of rows (QuantizedMatrix::multiply's row groups), not once per token.
// A last tile with fewer rows repeats its last row (computed again, not stored).
#pragma once

#include <algorithm>
#include <cstddef>

#include "quantized_kernels.h"

namespace pagedkv::quant_detail {
namespace {

// Every tile prefetches the weights of the tile below it (the next kRows rows, same columns)
// while it works: the hardware prefetcher alone, following kRows short rows at once, left one
// token's Q8_0 rows at 19 GB/s and F16 rows at 22-27 GB/s of one core's 40 (a streaming read);
// with this, 24 and 33 GB/s (the former AVX-512 build on rows, a 65536 x 2048 matrix on huge
// pages, one thread, CPU time).
// The last tile of a matrix prefetches past its end: harmless, prefetches never fault.
template <int kTileRows>
ptrdiff_t next_tile_offset(const std::byte* const* w) {
  return (w[1] - w[0]) * kTileRows;  // 0 for a one-row last tile (its rows repeat)
}

// The tiles of the last T < kTokens tokens.
template <int T, class Tile, class At>
void multiply_token_tail(int left, const std::byte* const* rows, const std::byte** tokens, int cols, At at,
                         size_t y_stride, int rows_out) {
  if constexpr (T >= 1) {
    if (left == T) Tile::template tile<T>(rows, tokens, cols, at(T), y_stride, rows_out);
    else multiply_token_tail<T - 1, Tile>(left, rows, tokens, cols, at, y_stride, rows_out);
  }
}

// Tile::tile<T>(w, x, cols, y, y_stride, rows_out): w holds kRows row pointers, x T token
// pointers (prepared activations); stores y[t * y_stride + r] for t < T, r < rows_out.
template <int kRows, int kTokens, class Tile>
void multiply_rows_tiled(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  static_assert(kTokens >= 1 && kTokens <= 8);
  const int n = x.num_tokens;
  for (int r = r0; r < r1; r += kRows) {
    const int rows_out = std::min(kRows, r1 - r);
    const std::byte* rows[kRows];
    for (int i = 0; i < kRows; ++i) rows[i] = w.base + static_cast<size_t>(r + std::min(i, rows_out - 1)) * w.row_bytes;
    const std::byte* tokens[kTokens];
    int t = 0;
    // Points `tokens` at the next `count` tokens; their first output.
    auto at = [&](int count) {
      for (int i = 0; i < count; ++i) tokens[i] = x.data + static_cast<size_t>(t + i) * x.stride;
      return y + static_cast<size_t>(t) * y_stride + static_cast<size_t>(r);
    };
    for (; t + kTokens <= n; t += kTokens)
      Tile::template tile<kTokens>(rows, tokens, w.cols, at(kTokens), y_stride, rows_out);
    multiply_token_tail<kTokens - 1, Tile>(n - t, rows, tokens, w.cols, at, y_stride, rows_out);
  }
}

}  // namespace
}  // namespace pagedkv::quant_detail
