// The software prefetch of a super-block's lines ahead of a K-quant tile, spread over the steps of
// its sums: step k of `parts` issues its share of the lines. A burst of a super-block's 21-53 lines
// at its start stalled the tile's own loads (presumably by taking the core's miss buffers): one
// token from memory ran at 55-75 % of the spread prefetch's rate on Zen 3 (AVX2 tiles) and Zen 4
// (AVX-512 tiles). Included by the AVX2 and AVX-512 kernel files; internal linkage.
#pragma once

#include <xmmintrin.h>

#include <cstddef>

namespace pagedkv::quant_detail {
namespace {

struct SpreadPrefetch {
  const std::byte* first;  // the first line to prefetch
  int lines;
  void share(int k, int parts) const {
    for (int l = lines * k / parts; l < lines * (k + 1) / parts; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(first + 64 * static_cast<size_t>(l)), _MM_HINT_T0);
  }
};

}  // namespace
}  // namespace pagedkv::quant_detail
