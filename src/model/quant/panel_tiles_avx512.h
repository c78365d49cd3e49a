// The tile driver the AVX-512 panel builds share (quantized_kernels_avx512.cpp: F16, BF16, Q8_0,
// Q4_0, IQ4_NL; kquant_kernels_avx512.cpp: Q4_K, Q5_K, Q6_K, IQ4_XS; low_bit_kernels_avx512.cpp:
// Q3_K, Q2_K): how a batch's token groups and a row group's panels are cut into tiles, how a tile's
// accumulators are stored, and the loop and Kernel of the super-block formats' tiles. Include it
// only from translation units compiled for AVX-512; everything has internal linkage.
//
// A Kernel provides:
//   using X                      its prepared record per token (a group's records side by side)
//   tile<P, T>(panel, layout, x, y, y_stride, rows_out)   P panels x T tokens
//   panels_for(tokens)           panels per tile for a group of that many tokens (1, 2 or 4)
//   kTokensOnFourPanels, kTokensOnTwoPanels   the most tokens a 4- / 2-panel tile takes (0: none)
//   token_bytes(layout)          prepared bytes per token
//   kActivationBlockBytes        optional: see multiply_panels_with
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "pagedkv/model/format/block_formats.h"  // kSuperBlock
#include "quantized_kernels.h"
#include "spread_prefetch.h"

namespace pagedkv::quant_detail {
namespace {

constexpr int kMaxTokens = 16;  // tokens per tile: a batch is prepared in groups of 16 tokens
// Software prefetch distance within a panel's stream, ahead of the hardware prefetcher. A tile of
// one panel and many tokens reads its stream slowly (it is compute-bound): far ahead, so that the
// lines arrive in time (6 KiB: batch-32 steps 7-12% faster than 2 KiB, as fast as 12 KiB). Tiles
// of 2-4 panels for few tokens are memory-bound, with a stream per panel: 2 KiB each (6 KiB made
// batch-1 steps 10-15% slower).
template <int P>
constexpr size_t kPrefetchAhead = P == 1 ? 6144 : 2048;

__mmask16 rows_mask(int rows_out) { return static_cast<__mmask16>((1u << rows_out) - 1); }

// f.template operator()<G>(t0) for a tile's T tokens in groups of G = min(T, kGroup) (the last
// group the rest): a group's chains stay in registers beside the weights' registers, while the T
// per-token sums, touched once per sub-block, may live in memory.
template <int T, int kGroup, class F>
void for_token_groups(F&& f) {
  constexpr int G = T < kGroup ? T : kGroup;
#pragma GCC unroll 4
  for (int t0 = 0; t0 + G <= T; t0 += G) f.template operator()<G>(t0);
  if constexpr (T % G != 0) f.template operator()<T % G>(T - T % G);
}

// A tile's results: output (token t, row 16 p + i) is lane i of acc[p][t], for the panel's rows
// that exist (rows_out[p] of them).
template <int P, int T>
void store_tile(const __m512 (&acc)[P][T], float* y, size_t y_stride, const int* rows_out) {
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
      _mm512_mask_storeu_ps(y + static_cast<size_t>(t) * y_stride + static_cast<size_t>(p) * kPanelRows,
                            rows_mask(rows_out[p]), acc[p][t]);
}

// Kernel::tile<P, T'> for a group of `tokens` (1..T) tokens.
template <class Kernel, int P, int T>
struct Tiles {
  template <class... Args>
  static void run(int tokens, Args... args) {
    if constexpr (T > 1) {
      if (tokens < T) return Tiles<Kernel, P, T - 1>::run(tokens, args...);
    }
    Kernel::template tile<P, T>(args...);
  }
};

// The tiles of one token group (tokens t0..) over panels [p0, p1). Group g starts at 16g tokens'
// worth of bytes: every earlier group is full.
template <class Kernel>
void group_over_panels(const WeightPanels& w, int p0, int p1, const Activations& acts, int t0, float* y,
                       size_t y_stride, int max_panels) {
  const PanelLayout& l = w.layout;
  const int tokens = std::min(kMaxTokens, acts.num_tokens - t0);
  const auto* x =
      reinterpret_cast<const typename Kernel::X*>(acts.data + static_cast<size_t>(t0) * Kernel::token_bytes(l));
  // Kernels without 2- or 4-panel tiles (kTokensOn...Panels 0) get none compiled.
  constexpr int kMostPanels = Kernel::kTokensOnFourPanels > 0 ? 4 : Kernel::kTokensOnTwoPanels > 0 ? 2 : 1;
  const int want = std::min({max_panels, kMostPanels, Kernel::panels_for(tokens)});
  for (int p = p0; p < p1;) {
    const int left = p1 - p;
    const int panels = want >= 4 && left >= 4 ? 4 : want >= 2 && left >= 2 ? 2 : 1;
    int rows_out[4];
    for (int i = 0; i < panels; ++i) rows_out[i] = std::min(kPanelRows, l.rows - (p + i) * kPanelRows);
    const std::byte* panel = w.base + static_cast<size_t>(p) * l.panel_bytes;
    float* yp = y + static_cast<size_t>(t0) * y_stride + static_cast<size_t>(p) * kPanelRows;
    if (panels == 4) {
      if constexpr (kMostPanels >= 4)
        Tiles<Kernel, 4, Kernel::kTokensOnFourPanels>::run(tokens, panel, l, x, yp, y_stride, rows_out);
    } else if (panels == 2) {
      if constexpr (kMostPanels >= 2)
        Tiles<Kernel, 2, Kernel::kTokensOnTwoPanels>::run(tokens, panel, l, x, yp, y_stride, rows_out);
    } else {
      Tiles<Kernel, 1, kMaxTokens>::run(tokens, panel, l, x, yp, y_stride, rows_out);
    }
    p += panels;
  }
}

// A kernel's kActivationBlockBytes, or no blocks.
template <class Kernel>
constexpr size_t activation_block_bytes() {
  if constexpr (requires { Kernel::kActivationBlockBytes; }) return Kernel::kActivationBlockBytes;
  else return SIZE_MAX;
}

// Panels [p0, p1) for every token group. With several groups, panel by panel: every group passes
// over a panel (up to 256 KiB) right after the first brought it in, while it is still in L2.
// Kernels that declare kActivationBlockBytes take a prompt in blocks of tokens whose prepared
// activations stay in L2 too (a few hundred KiB), each block over every panel: streaming the
// whole batch's f32 activations from L3 for every panel (4 MiB for 512 tokens of 2,048 columns,
// 64 bytes per 16 FMAs) left a 512-token product 12-15 % slower per multiply-add than a 32-token
// one (bench_model, 8192 x 2048).
template <class Kernel>
void multiply_panels_with(const WeightPanels& w, int p0, int p1, const Activations& acts, float* y, size_t y_stride) {
  const int n = acts.num_tokens;
  if (n <= kMaxTokens) return group_over_panels<Kernel>(w, p0, p1, acts, 0, y, y_stride, 4);
  const size_t block_tokens = activation_block_bytes<Kernel>() / Kernel::token_bytes(w.layout);
  const int block =
      static_cast<int>(std::clamp<size_t>(block_tokens / kMaxTokens, 1, (n + kMaxTokens - 1) / kMaxTokens)) *
      kMaxTokens;
  for (int b0 = 0; b0 < n; b0 += block)
    for (int p = p0; p < p1; ++p)
      for (int t0 = b0; t0 < std::min(n, b0 + block); t0 += kMaxTokens)
        group_over_panels<Kernel>(w, p, p + 1, acts, t0, y, y_stride, 1);
}

// ---- super-block formats (Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K, Q2_K) ---------------------------------

// The loop of their tiles: P panels x the T tokens of group `x` (T records per super-block, side
// by side), super-block by super-block. Per panel add_super_block(chunk, scales, xb, acc[p],
// prefetch) adds the super-block's contribution to that panel's T accumulators: the format's
// integer sums, then the scalar twin's float step; its 8 sub-block steps prefetch the stream
// ahead, a share each (`prefetch.share(step, 8)`, spread_prefetch.h). Always inlined, so that the
// accumulators stay in registers across the call.
template <TensorType kType, int P, int T, class Record, class AddSuperBlock>
[[gnu::always_inline]] inline void super_block_tile(const std::byte* panel, const PanelLayout& l, const Record* x,
                                                    float* y, size_t y_stride, const int* rows_out,
                                                    AddSuperBlock add_super_block) {
  constexpr size_t kChunk = PanelLayout::quant_block_bytes(kType);
  const int blocks = l.cols / kSuperBlock;
  __m512 acc[P][T];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const Record* xb = x + static_cast<size_t>(b) * T;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const std::byte* base = panel + static_cast<size_t>(p) * l.panel_bytes;
      const std::byte* chunk = base + PanelLayout::chunk_at(kType, b);
      add_super_block(chunk, base + PanelLayout::k_scales_at(kType, b, blocks), xb, acc[p],
                      super_block_prefetch<T, kChunk>(chunk));
    }
  }
  store_tile<P, T>(acc, y, y_stride, rows_out);
}

// The scalar twin's float step for one super-block of a panel: acc[t] += (d * d_x) * sum[t] - (dmin
// * d_x) * mins[t], with the 16 rows' fp16 d at `ds` and dmin at ds + 32. A format without mins
// (kMins false) subtracts the token's no_mins instead, (0 * d_x) * 0, the very value the twin's
// zero dmin and mins give.
template <bool kMins, int T, class Record>
[[gnu::always_inline]] inline void add_float_step(__m512* acc, const std::byte* ds, const Record* xb,
                                                  const __m512 (&sum)[T], const __m512i (&mins)[T]) {
  const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(ds)));
  const __m512 dmin =
      kMins ? _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(ds + 32))) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    const __m512 dx = _mm512_set1_ps(xb[t].d);
    const __m512 with_sum = _mm512_mul_ps(_mm512_mul_ps(d, dx), sum[t]);
    const __m512 with_mins =
        kMins ? _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(mins[t])) : _mm512_set1_ps(xb[t].no_mins);
    acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(with_sum, with_mins));
  }
}

// The Kernel of a super-block format: Format provides X (its per-token record, one per
// super-block) and tile<P, T>. Every tile takes one panel, one stream, even for a single token: 2 or
// 4 panels of a few tokens (more chains, more streams in flight) read memory at half its
// bandwidth on Zen 4 (a 1B Q4_K_M decode step, batch 1: 43 ms on 4 panels, 28 ms on one with the
// spread prefetch; batch 8: 83 against 54 ms).
template <class Format>
struct SuperBlockKernel : Format {
  static int panels_for(int) { return 1; }
  static constexpr int kTokensOnFourPanels = 0, kTokensOnTwoPanels = 0;
  static size_t token_bytes(const PanelLayout& l) {
    return static_cast<size_t>(l.cols / kSuperBlock) * sizeof(typename Format::X);
  }
};

}  // namespace
}  // namespace pagedkv::quant_detail
