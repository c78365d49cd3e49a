// The software prefetch of the super-block tiles (Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K, Q2_K; the AVX2
// and AVX-512 builds): a super-block's lines, some distance ahead in the panel's stream, issued a
// share per step of its sums rather than in one burst at its start. A burst stalled the tile's own
// loads (presumably by taking the core's miss buffers): one token from memory, 65536 x 2048, one
// Zen 3 core, AVX2 tiles: Q6_K 11.6 -> 19.0 GB/s spread, Q5_K 11.2 -> 17.3, Q4_K 14.9 -> 20.5; on
// Zen 4 the AVX-512 tiles read memory at half its rate with bursts. Included by both kernel files;
// internal linkage.
#pragma once

#include <xmmintrin.h>

#include <cstddef>

namespace pagedkv::quant_detail {
namespace {

struct SpreadPrefetch {
  const std::byte* first;  // the first line to prefetch
  int lines;
  // Step k of `parts`: its share of the lines.
  void share(int k, int parts) const {
    for (int l = lines * k / parts; l < lines * (k + 1) / parts; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(first + 64 * static_cast<size_t>(l)), _MM_HINT_T0);
  }
};

// How far ahead a tile of T tokens prefetches. One token is bound by the stream's latency more
// than by its arithmetic: far ahead (a 1B Q4_K_M decode step on a Zen 3 core: 99.6 ms with 2 KiB,
// 84 with 4 KiB, 67-73 with 8-16 KiB); a tile of several tokens reads slowly, 4 KiB.
template <int T>
constexpr size_t kSuperBlockPrefetchAhead = T == 1 ? 12288 : 4096;

// The prefetch a tile of T tokens spreads over the sums of the super-block at `chunk` (kChunk
// bytes): as many lines, kSuperBlockPrefetchAhead<T> ahead, and one more (the super-block's
// scales, stored after the chunks, are at most one line).
template <int T, size_t kChunk>
SpreadPrefetch super_block_prefetch(const std::byte* chunk) {
  return {chunk + kSuperBlockPrefetchAhead<T>, static_cast<int>(kChunk / 64) + 1};
}

}  // namespace
}  // namespace pagedkv::quant_detail
