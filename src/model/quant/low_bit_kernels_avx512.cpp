// The AVX-512 build (F, VL, BW, DQ and VNNI) of QuantizedMatrix's products of the low-bit
// super-block formats Q3_K and Q2_K, on the weights repacked in panels of 16 rows
// (quantized_panels.h); entered only after the run-time check in quantized_matrix.cpp. (IQ4_NL,
// whose blocks are Q4_0's, runs Q4_0's tiles: quantized_kernels_avx512.cpp.) The activations are
// quantized to Q8_K as the scalar twin (block_dot.h) does, by the very same function, and the
// results equal the twin's bit for bit: inside a super-block every product is an exact integer sum
// whatever its order, and the super-block's contribution is added to the row's float accumulator
// in block order with the twin's float operations (this file is compiled without fused
// multiply-adds).
//
// One 64-byte register of weights holds 4 columns of 16 rows as unsigned levels, vpdpbusd's
// unsigned operand; the activation's 4 bytes are broadcast, and each int32 lane gathers one row's
// sum.
//   Q3_K: levels q + 4 (0..7: two low bits | the hmask bit << 2), per 16-value sub-block a chain
//     of 4 vpdpbusd from -4 times the activation's 16-value sum, so that it sums q * x: at most
//     16 * 4 * 127 in magnitude (Q8_K values lie in [-127, 127]), an int16, so one vpdpwssd with
//     the 6-bit scale - 32 in the low half of each lane (zero above) multiplies it and adds it to
//     the sum, as the Q6_K panels do.
//   Q2_K: levels 0..3, no offset: chains of 4 vpdpbusd from zero (at most 16 * 3 * 127), times
//     the 4-bit scale with one vpdpwssd; the mins: 8 vpdpwssd of (min, min) int16 pairs against
//     the activation's 16-value sums, paired the same way.
// Tiles of one panel x up to 16 tokens reuse each unpacked register for all their tokens, one
// panel even for a single token, with the super-block's prefetch spread over its sub-block steps,
// through the driver the K-quant builds share (SuperBlockKernel, panel_tiles_avx512.h).
//
// GCC 12 flags the deliberately undefined pass-through operands inside some AVX-512 intrinsics as
// uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <utility>

#include "pagedkv/model/format/block_formats.h"  // quantize_row_q8_k
#include "panel_tiles_avx512.h"
#include "quantized_kernels.h"
#include "vnni_panel_ops_avx512.h"

namespace pagedkv::quant_detail {
namespace {

// ---- prepared activations ------------------------------------------------------------------------
// The batch in groups of up to 16 tokens; per block, one record per token of the group (side by
// side), so that a tile reads all its tokens through one pointer.

// Q3_K / Q2_K: per super-block, the Q8_K values and d, and what the levels' offset and the mins
// meet, precomputed once per token.
struct Q8KRecord {
  int8_t q[kSuperBlock];
  float d;
  int32_t start_q3[16];  // Q3_K: -4 times each 16-value sum, the start of that sub-block's chain
  int32_t sum_pairs[8];  // Q2_K: the 16-value sums of sub-blocks 2c and 2c + 1 as an int16 pair
  // Q3_K: (0 * d) * 0, what the scalar twin subtracts for its zero dmin and mins (0 of d's sign,
  // NaN where d is not finite), so that the tiles subtract it instead of multiplying.
  float no_mins;
  int32_t unused[6];
};
static_assert(sizeof(Q8KRecord) == 384);

size_t token_bytes(int cols) { return static_cast<size_t>(cols / kSuperBlock) * sizeof(Q8KRecord); }

size_t prepared_bytes(TensorType, int cols, int num_tokens) {
  return static_cast<size_t>(num_tokens) * token_bytes(cols);
}

void fill_record(const BlockQ8_K& a, Q8KRecord& r) {
  std::memcpy(r.q, a.qs, sizeof r.q);
  r.d = a.d;
  r.no_mins = (0.0f * r.d) * 0.0f;
  for (int s = 0; s < 16; ++s) r.start_q3[s] = -4 * a.bsums[s];
  for (int c = 0; c < 8; ++c)
    r.sum_pairs[c] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(a.bsums[2 * c])) |
                                          (static_cast<uint32_t>(static_cast<uint16_t>(a.bsums[2 * c + 1])) << 16));
  std::memset(r.unused, 0, sizeof r.unused);
}

// Every token's super-blocks quantized by the twin's own quantize_row_q8_k, then stored as
// records in the group layout.
void prepare(TensorType, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out) {
  const int blocks = cols / kSuperBlock;
  for (int t0 = 0; t0 < num_tokens; t0 += kMaxTokens) {
    const int tokens = std::min(kMaxTokens, num_tokens - t0);
    auto* group = reinterpret_cast<Q8KRecord*>(out) + static_cast<size_t>(t0) * static_cast<size_t>(blocks);
    for (int t = 0; t < tokens; ++t) {
      const float* xt = x + static_cast<size_t>(t0 + t) * x_stride;
      for (int b = 0; b < blocks; ++b) {
        BlockQ8_K a;
        quantize_row_q8_k({xt + static_cast<size_t>(b) * kSuperBlock, static_cast<size_t>(kSuperBlock)}, &a);
        fill_record(a, group[static_cast<size_t>(b) * static_cast<size_t>(tokens) + static_cast<size_t>(t)]);
      }
    }
  }
}

// ---- Q3_K / Q2_K -----------------------------------------------------------------------------------

// Q3_K's chunk (quantized_panels.h): registers 8n + v the low bits qs[32n + 4v..], 16 + v the
// high bits hmask[4v..], 24-26 the 12 packed scale bytes. Q2_K's: registers 8n + v the levels as
// Q3_K's low bits, 16-19 the 16 scale bytes.
constexpr int kHmaskAt = 16, kQ3ScalesAt = 24, kQ2ScalesAt = 16;

// Q3_K's 6-bit scales - 32 of the 16 rows as bytes, sub-blocks 4g..4g+3 in register g.
struct Q3Scales {
  __m512i g[4];
};

// The low 4
// bits from the low (g = 0, 1) or high (g = 2, 3) nibbles of bytes 0-3 (g even) or 4-7 (g odd),
// the high 2 bits from bits 2g, 2g + 1 of bytes 8-11.
Q3Scales q3_k_scales(const std::byte* chunk) {
  const __m512i w0 = load(chunk + kQ3ScalesAt * 64), w1 = load(chunk + (kQ3ScalesAt + 1) * 64),
                w2 = load(chunk + (kQ3ScalesAt + 2) * 64);
  const __m512i low4 = bytes(0x0F), bits45 = bytes(0x30);
  const __m512i biased[4] = {
      or_masked(_mm512_and_si512(w0, low4), _mm512_slli_epi16(w2, 4), bits45),
      or_masked(_mm512_and_si512(w1, low4), _mm512_slli_epi16(w2, 2), bits45),
      or_masked(_mm512_and_si512(_mm512_srli_epi16(w0, 4), low4), w2, bits45),
      or_masked(_mm512_and_si512(_mm512_srli_epi16(w1, 4), low4), _mm512_srli_epi16(w2, 2), bits45)};
  Q3Scales out;
  for (int g = 0; g < 4; ++g) out.g[g] = _mm512_sub_epi8(biased[g], bytes(32));
  return out;
}

// Sub-block s's scale of the 16 rows as an int16 in the low half of each lane, zero above (the
// chain's partner in vpdpwssd). Q3_K: the signed byte s % 4 of scales[s / 4]; Q2_K: the low
// nibble of byte s % 4 of the scale register s / 4.
template <TensorType kType>
__m512i sub_block_scale(const std::byte* chunk, const Q3Scales& q3_scales, int s) {
  const int k = s % 4;
  if constexpr (kType == TensorType::kQ3_K) {
    // byte k to the top of the low half, then an arithmetic shift extends its sign
    return _mm512_srai_epi16(_mm512_shuffle_epi8(q3_scales.g[s / 4], dword_pattern(-1, k, -1, -1)), 8);
  } else {
    const __m512i packed = load(chunk + (kQ2ScalesAt + s / 4) * 64);
    return _mm512_shuffle_epi8(_mm512_and_si512(packed, bytes(0x0F)), dword_pattern(k, -1, -1, -1));
  }
}

// The levels of columns 128n + 32j + 4v.. (v = 0..7; sub-blocks 8n + 2j and 8n + 2j + 1).
template <TensorType kType, int kN, int kJ>
void unpack_levels(const std::byte* chunk, __m512i (&w)[8]) {
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    const __m512i low = _mm512_and_si512(shift_bits<-2 * kJ>(load(chunk + (8 * kN + v) * 64)), bytes(0x03));
    if constexpr (kType == TensorType::kQ3_K)  // the hmask bit 4n + j of the value, to bit 2
      w[v] = or_masked(low, shift_bits<2 - 4 * kN - kJ>(load(chunk + (kHmaskAt + v) * 64)), bytes(0x04));
    else w[v] = low;
  }
}

// Tokens whose chains run side by side (two chains each: 8 in flight).
constexpr int kTokenGroup = 4;

// The sub-blocks 8n + 2j, 8n + 2j + 1 of one super-block of one panel for the tile's tokens: each
// 16-value chain times its scale (vpdpwssd) into sum.
template <TensorType kType, int kN, int kJ, int T>
void sub_block_pair(const std::byte* chunk, const Q3Scales& q3_scales, const Q8KRecord* xb, __m512i (&sum)[T]) {
  __m512i w[8];
  unpack_levels<kType, kN, kJ>(chunk, w);
  constexpr int sb = 8 * kN + 2 * kJ;
  const __m512i scale[2] = {sub_block_scale<kType>(chunk, q3_scales, sb),
                            sub_block_scale<kType>(chunk, q3_scales, sb + 1)};
  constexpr int G = T < kTokenGroup ? T : kTokenGroup;
  const auto tokens = [&]<int H>(int t0) {
    __m512i chain[2][H];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 16
      for (int g = 0; g < H; ++g)
        chain[h][g] =
            kType == TensorType::kQ3_K ? _mm512_set1_epi32(xb[t0 + g].start_q3[sb + h]) : _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) dot_chains<4>(chain[h], w + 4 * h, xb + t0, 128 * kN + 32 * kJ + 16 * h);
#pragma GCC unroll 16
    for (int g = 0; g < H; ++g)
      sum[t0 + g] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sum[t0 + g], chain[0][g], scale[0]), chain[1][g], scale[1]);
  };
#pragma GCC unroll 4
  for (int t0 = 0; t0 + G <= T; t0 += G) tokens.template operator()<G>(t0);
  if constexpr (T % G != 0) tokens.template operator()<T % G>(T - T % G);
}

// Q3_K / Q2_K: the integer sums (offset included) of one super-block of one panel for the tile's
// tokens, and Q2_K's mins.
template <TensorType kType, int T>
void low_bit_sums(const std::byte* chunk, const Q8KRecord* xb, const SpreadPrefetch& prefetch, __m512i (&sum)[T],
                  __m512i (&mins)[T]) {
  const Q3Scales q3_scales = kType == TensorType::kQ3_K ? q3_k_scales(chunk) : Q3Scales{};
  [&]<int... i>(std::integer_sequence<int, i...>) {
    ((prefetch.share(i, 8), sub_block_pair<kType, i / 4, i % 4, T>(chunk, q3_scales, xb, sum)), ...);
  }
  (std::make_integer_sequence<int, 8>{});
  if constexpr (kType == TensorType::kQ2_K) {
    // The mins of sub-blocks 2c, 2c + 1 (high nibbles of bytes 2c % 4.. of scale register c / 2)
    // as a zero-extended int16 pair per row.
    __m512i pairs[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const int j = 2 * (c % 2);
      const __m512i mins4 =
          _mm512_and_si512(_mm512_srli_epi16(load(chunk + (kQ2ScalesAt + c / 2) * 64), 4), bytes(0x0F));
      pairs[c] = _mm512_shuffle_epi8(mins4, dword_pattern(j, -1, j + 1, -1));
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) m = _mm512_dpwssd_epi32(m, pairs[c], _mm512_set1_epi32(xb[t].sum_pairs[c]));
      mins[t] = m;
    }
  }
}

// A format's tiles: P panels x the T tokens of group `x` (Q8KRecords, T per super-block) through
// super_block_tile; per super-block the sums, then the scalar twin's float step: acc += (d * d_x)
// * sum - (dmin * d_x) * mins (add_float_step; Q3_K has no mins and subtracts no_mins).
template <TensorType kType>
struct LowBitFormat {
  using X = Q8KRecord;
  template <int P, int T>
  static void tile(const std::byte* panel, const PanelLayout& l, const X* x, float* y, size_t y_stride,
                   const int* rows_out) {
    constexpr bool kMins = kType == TensorType::kQ2_K;
    const auto add_super_block = [](const std::byte* chunk, const std::byte* ds, const X* xb, __m512* acc,
                                    const SpreadPrefetch& prefetch) __attribute__((always_inline)) {
      __m512i isum[T], mins[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) isum[t] = mins[t] = _mm512_setzero_si512();
      low_bit_sums<kType, T>(chunk, xb, prefetch, isum, mins);
      __m512 sum[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) sum[t] = _mm512_cvtepi32_ps(isum[t]);
      add_float_step<kMins, T>(acc, ds, xb, sum, mins);
    };
    super_block_tile<kType, P, T>(panel, l, x, y, y_stride, rows_out, add_super_block);
  }
};

// ---- the driver ----------------------------------------------------------------------------------

template <TensorType kType>
using LowBitKernel = SuperBlockKernel<LowBitFormat<kType>>;

void multiply_panels(const WeightPanels& w, int p0, int p1, const Activations& x, float* y, size_t y_stride) {
  switch (w.layout.type) {
    case TensorType::kQ3_K:
      return multiply_panels_with<LowBitKernel<TensorType::kQ3_K>>(w, p0, p1, x, y, y_stride);
    default:
      return multiply_panels_with<LowBitKernel<TensorType::kQ2_K>>(w, p0, p1, x, y, y_stride);
  }
}

}  // namespace

const PanelsKernel& avx512_low_bit_panels_kernel() {
  static const PanelsKernel k{prepared_bytes, prepare, multiply_panels};
  return k;
}

}  // namespace pagedkv::quant_detail
