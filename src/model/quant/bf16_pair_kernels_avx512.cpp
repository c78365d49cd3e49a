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
#include <climits>
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

// The same for one value (the tail of a batch whose rows are too far apart for a gather's 32-bit
// offsets): the low 16 bits.
uint32_t round_to_bf16(float v) {
  alignas(64) float lanes[16] = {v};
  alignas(64) uint32_t bf[16];
  _mm512_store_si512(bf, round_to_bf16(_mm512_load_ps(lanes)));
  return bf[0];
}

// A group's tokens (x, x_stride apart) to its pairs: pair j of token t at g[j * tokens + t], the
// even column in the low half, a zero column after an odd count (meeting the panels' zero pad
// column: adding 0 * 0 changes no sum). A column's values of the group's tokens are gathered
// across the tokens' rows, 16 tokens at a time.
void prepare_group(const float* x, size_t x_stride, int tokens, int cols, uint32_t* g) {
  const int pairs = column_pairs(cols);
  if (x_stride * kMaxTokens * sizeof(float) > INT32_MAX) {
    for (int t = 0; t < tokens; ++t) {
      const float* xt = x + static_cast<size_t>(t) * x_stride;
      for (int j = 0; j < pairs; ++j)
        g[static_cast<size_t>(j) * static_cast<size_t>(tokens) + static_cast<size_t>(t)] =
            round_to_bf16(xt[2 * j]) | (2 * j + 1 < cols ? round_to_bf16(xt[2 * j + 1]) << 16 : 0u);
    }
    return;
  }
  const __mmask16 live = rows_mask(tokens);
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int>(x_stride)));
  for (int j = 0; j < pairs; ++j) {
    const __m512 even = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, rows, x + 2 * j, 4);
    const __m512 odd = 2 * j + 1 < cols ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, rows, x + 2 * j + 1, 4)
                                        : _mm512_setzero_ps();
    _mm512_mask_storeu_epi32(g + static_cast<size_t>(j) * static_cast<size_t>(tokens), live,
                             _mm512_or_si512(round_to_bf16(even), _mm512_slli_epi32(round_to_bf16(odd), 16)));
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
