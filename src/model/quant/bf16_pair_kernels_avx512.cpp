// BF16 weights multiplied with vdpbf16ps (AVX512-BF16): the build QuantizedMatrix runs for BF16
// panels where bf16_products() says kPairs (quantized_matrix.h), entered only after the run-time
// checks for AVX-512, VNNI and BF16.
//
// The panels are the AVX-512 build's BF16 panels (quantized_panels.h): a 32-bit lane holds one
// row's pair of adjacent columns, the even column in the low half, exactly vdpbf16ps's operand. The
// activations are rounded to BF16 once, when the batch is prepared, and stored as pairs too: per
// column pair, a group's T tokens side by side (4 bytes each). A step of a tile then meets 2 columns
// x 16 rows of a token in one instruction, against 2 FMAs and a widening in the widened build: on
// AMD Zen 4 vdpbf16ps retires 32 multiply-adds per cycle where its FMAs retire 16
// (BM_PeakMultiplyAdd: 117 against 58.5 GMAC/s on one core).
//
// What one step computes, per lane (the instruction's definition): acc += w_odd * x_odd, then acc +=
// w_even * x_even, each a fused multiply-add rounded to nearest even, with BF16 subnormal inputs
// read as zero and subnormal results flushed to zero. The BF16 products are exact in f32, so the only
// roundings are the two sums per pair; each output is one chain over the column pairs in order,
// whatever tile or batch it runs in.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC bug 105593 (see quantized_kernels_avx512.cpp)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "panel_tiles_avx512.h"
#include "quantized_kernels.h"

namespace pagedkv::quant_detail {
namespace {

int column_pairs(int cols) { return (cols + 1) / 2; }

size_t pair_token_bytes(int cols) { return static_cast<size_t>(column_pairs(cols)) * sizeof(uint32_t); }

size_t prepared_bytes(TensorType, int cols, int num_tokens) {
  return static_cast<size_t>(num_tokens) * pair_token_bytes(cols);
}

// 16 f32 values rounded to BF16 to nearest even (NaN stays NaN, quieted), in the low 16 bits of
// each lane: f32_to_bf16 (float_convert.h) 16 lanes at a time. Done in integers rather than with
// vcvtneps2bf16, whose treatment of subnormal inputs the twin would have to copy.
__m512i round_to_bf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7F800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

// 16 x 16 32-bit lanes transposed in place: lane j of row t becomes lane t of row j. Three
// rounds within 128-bit blocks and across them, 64 shuffles.
[[gnu::always_inline]] inline void transpose_16x16(__m512i (&r)[16]) {
  __m512i a[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {  // rows i, i + 1 interleaved: lanes (4b, 4b + 1) and (4b + 2, 4b + 3)
    a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {  // rows i..i + 3: row i + c holds their lane 4b + c in block b
    r[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // rows c of row groups (0, 1), then (2, 3): their blocks 0, 2 and 1, 3
    const int row = i / 4 * 8 + i % 4;
    a[i] = _mm512_shuffle_i32x4(r[row], r[row + 4], 0x88);
    a[8 + i] = _mm512_shuffle_i32x4(r[row], r[row + 4], 0xDD);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // lane 4b + c of the 16 rows, for blocks b = 0, 2 (k = 0) and 1, 3
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k) {
      const __m512i groups01 = a[8 * k + c], groups23 = a[8 * k + 4 + c];
      r[4 * k + c] = _mm512_shuffle_i32x4(groups01, groups23, 0x88);
      r[8 + 4 * k + c] = _mm512_shuffle_i32x4(groups01, groups23, 0xDD);
    }
  }
}

// A group's tokens (x, x_stride apart) to its pairs: pair j of token t at g[j * tokens + t], the
// even column in the low half, a zero column after an odd count (meeting the panels' zero pad
// column: adding 0 * 0 changes no sum). 16 pairs at a time: each token's 32 columns rounded and
// packed into pairs in one register (a token's row read in order), the 16 tokens' registers then
// transposed into the pairs' rows. Two gathers per pair and 16 tokens did the same: a 1B BF16
// prefill of 512 tokens on Zen 4 went from 195.4 to 200.1 tokens/s (medians of 4 alternated runs).
void prepare_group(const float* x, size_t x_stride, int tokens, int cols, uint32_t* g) {
  const int pairs = column_pairs(cols);
  const __mmask16 live = rows_mask(tokens);
  // Word k of the packed register: the low half (the BF16) of lane k of the two rounded halves.
  const __m512i even_words = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                                              26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int j0 = 0; j0 < pairs; j0 += 16) {
    const int c0 = 2 * j0, count = std::min(32, cols - c0);
    const __mmask16 low = rows_mask(std::min(16, count)), high = rows_mask(std::max(0, count - 16));
    __m512i r[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
      if (t >= tokens) {
        r[t] = _mm512_setzero_si512();
        continue;
      }
      const float* xt = x + static_cast<size_t>(t) * x_stride + c0;
      const __m512i a = round_to_bf16(_mm512_maskz_loadu_ps(low, xt));
      const __m512i b = round_to_bf16(_mm512_maskz_loadu_ps(high, xt + 16));
      r[t] = _mm512_permutex2var_epi16(a, even_words, b);
    }
    transpose_16x16(r);
    const int rows = std::min(16, pairs - j0);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      if (j < rows) _mm512_mask_storeu_epi32(g + static_cast<size_t>(j0 + j) * static_cast<size_t>(tokens), live, r[j]);
  }
}

void prepare(TensorType, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out) {
  for (int t0 = 0; t0 < num_tokens; t0 += kMaxTokens) {
    const int tokens = std::min(kMaxTokens, num_tokens - t0);
    prepare_group(x + static_cast<size_t>(t0) * x_stride, x_stride, tokens, cols,
                  reinterpret_cast<uint32_t*>(out + static_cast<size_t>(t0) * pair_token_bytes(cols)));
  }
}

// P panels x the T tokens of group `x`, over every column pair: per step one 64-byte load per panel
// and one vdpbf16ps per panel and token, the token's pair an embedded broadcast.
template <int P, int T>
void pair_tile(const std::byte* panel, const PanelLayout& l, const uint32_t* x, float* y, size_t y_stride,
               const int* rows_out) {
  __m512 acc[P][T];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  const int steps = column_pairs(l.cols);
  for (int s = 0; s < steps; ++s) {
    const std::byte* at = panel + static_cast<size_t>(s) * 64;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p)
      _mm_prefetch(reinterpret_cast<const char*>(at + p * l.panel_bytes + kPrefetchAhead<P>), _MM_HINT_T0);
    __m512bh w[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) w[p] = reinterpret_cast<__m512bh>(_mm512_load_si512(at + p * l.panel_bytes));
    const uint32_t* xs = x + static_cast<size_t>(s) * T;
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xs[t])));
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[p][t] = _mm512_dpbf16_ps(acc[p][t], w[p], xv);
    }
  }
  store_tile<P, T>(acc, y, y_stride, rows_out);
}

struct PairKernel {
  using X = uint32_t;
  template <int P, int T>
  static void tile(const std::byte* panel, const PanelLayout& l, const X* x, float* y, size_t y_stride,
                   const int* rows_out) {
    pair_tile<P, T>(panel, l, x, y, y_stride, rows_out);
  }
  // vdpbf16ps's latency (6 cycles on Zen 4) wants at least 6-8 independent chains.
  static int panels_for(int tokens) { return tokens >= 8 ? 1 : tokens >= 4 ? 2 : 4; }
  static constexpr int kTokensOnFourPanels = 3, kTokensOnTwoPanels = 7;
  static size_t token_bytes(const PanelLayout& l) { return pair_token_bytes(l.cols); }
  // A prompt in blocks of tokens whose pairs stay in L2 while they pass over every panel.
  static constexpr size_t kActivationBlockBytes = size_t{256} << 10;
};

void multiply_panels(const WeightPanels& w, int p0, int p1, const Activations& x, float* y, size_t y_stride) {
  multiply_panels_with<PairKernel>(w, p0, p1, x, y, y_stride);
}

}  // namespace

const PanelsKernel& avx512_bf16_pair_panels_kernel() {
  static const PanelsKernel k{prepared_bytes, prepare, multiply_panels};
  return k;
}

}  // namespace pagedkv::quant_detail
