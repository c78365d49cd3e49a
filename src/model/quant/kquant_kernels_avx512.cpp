// The AVX-512 build (F, VL, BW, DQ and VNNI) of QuantizedMatrix's K-quant products (Q4_K, Q5_K,
// Q6_K) and IQ4_XS's, on the weights repacked in panels of 16 rows (quantized_panels.h); entered only after the
// run-time check in quantized_matrix.cpp. The activations are quantized to Q8_K as the scalar twin
// (block_dot.h) does, and the results equal the twin's bit for bit: inside a super-block every
// product is an exact integer sum whatever its order, and the super-block's contribution,
// (d * d_x) * sum - (dmin * d_x) * mins, is added to the row's float accumulator in block order
// with the twin's very float operations (this file is compiled without fused multiply-adds).
//
// One 64-byte register of weights holds 4 columns of 16 rows, the unsigned operand of vpdpbusd;
// the activation's 4 bytes are broadcast, and each of the 16 int32 lanes gathers one row's sum.
//   Q4_K / Q5_K: per sub-block of 32 columns, 8 registers of levels (0..15, or 0..31 with the
//     fifth bit) and 8 vpdpbusd per token into a fresh chain, times the sub-block's 6-bit scale
//     (Q5_K: vpmulld; Q4_K: in float, exactly, see sums_q4_k), the scales decoded once per
//     super-block and panel from the 12 packed bytes of the 16 rows; the mins: 4 vpdpwssd of
//     (min, min) int16 pairs against the activation's 32-value sums, paired the same way.
//   Q6_K: levels 0..63 (the file's q + 32), three of every four with one AND (the repacked layout
//     keeps the fourth's bits in the top of the other three's bytes); per 8 columns a chain of 2
//     vpdpbusd that starts at -32 times the activation's 8-value sum, so that it sums (q - 32) * x:
//     at most 8 * 32 * 127 in magnitude (Q8_K values lie in [-127, 127]), an int16. One vpdpwssd
//     with the int8 scale in the low half of each lane (zero above) multiplies it and adds it to
//     the sum: two micro-ops per sub-block where vpmulld and an add took three. Where a token's
//     16-value sums of |q| are at most 1023 (the activations of a forward pass, nearly always) a
//     whole sub-block's chain is an int16 too, and tiles of 4+ tokens take one vpdpwssd per
//     sub-block.
//   IQ4_XS: levels looked up from the nibbles (vpshufb) as unsigned kIq4NlValues + 128; per
//     sub-block of 32 columns a chain of 8 vpdpbusd that starts at -128 times the activation's
//     32-value sum, times the 6-bit scale - 32 (vpmulld).
// Tiles of one panel x up to 16 tokens reuse each unpacked register for all their tokens, one
// panel even for a single token (one stream; SuperBlockKernel in panel_tiles_avx512.h says why),
// with the super-block's prefetch spread over its sub-block steps (spread_prefetch.h). Per 32
// weights and token a tile of 16 tokens issues 8 vpdpbusd (the activation's 4 bytes an embedded
// broadcast) and, on the same two ports, Q4_K 2 (conversion, FMA), Q5_K / IQ4_XS 3 (vpmulld's
// two, an add), Q6_K 4 (2 on the narrow path) for the sub-block scales, plus about 1.5 for the
// unpacking shared by the tile's tokens and the super-block's float step.
//
// GCC 12 flags the deliberately undefined pass-through operands inside some AVX-512 intrinsics as
// uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "pagedkv/model/format/block_formats.h"  // kSuperBlock, the Q8_K rule
#include "panel_tiles_avx512.h"
#include "quantized_kernels.h"
#include "vnni_panel_ops_avx512.h"

namespace pagedkv::quant_detail {
namespace {

// ---- prepared activations ------------------------------------------------------------------------
// Per super-block, one record per token of the group (records of a group's tokens side by side):
// the Q8_K values and d, and what the weights' offsets and mins meet, precomputed once per token.
struct SuperRecord {
  int8_t q[kSuperBlock];
  float d;
  // Q4_K / Q5_K: the sums of the 32-value sub-blocks 2c and 2c + 1 as an int16 pair (c = 0..3).
  int32_t sum_pairs[4];
  // Q6_K: -32 times each 8-value sum, the start of the chain of that half of a sub-block; -32
  // times each 16-value sum, the start of a whole sub-block's chain, taken where q6_narrow is set:
  // every sub-block's sum of |q| is at most 1023, so a whole sub-block's chain, at most 32 times
  // that in magnitude, is an int16 too.
  int32_t start_q6[32];
  int32_t start16_q6[16];
  // IQ4_XS: -128 times each 32-value sum, the start of that sub-block's chain.
  int32_t start_iq4[8];
  // Q6_K / IQ4_XS: (0 * d) * 0, what the scalar twin subtracts for their zero dmin and mins (0 of
  // d's sign, NaN where d is not finite), so that the tiles subtract it instead of multiplying.
  float no_mins;
  int32_t q6_narrow;
  int32_t unused;
};
static_assert(sizeof(SuperRecord) == 512);

size_t token_bytes(int cols) { return static_cast<size_t>(cols / kSuperBlock) * sizeof(SuperRecord); }

size_t prepared_bytes(TensorType, int cols, int num_tokens) {
  return static_cast<size_t>(num_tokens) * token_bytes(cols);
}

// Lanes 2j and 2j + 1 added, as lane j of a vector of half the width.
__m256i pairwise_sums(__m512i v) { return _mm512_cvtepi64_epi32(_mm512_add_epi32(v, _mm512_srli_epi64(v, 32))); }
__m128i pairwise_sums(__m256i v) { return _mm256_cvtepi64_epi32(_mm256_add_epi32(v, _mm256_srli_epi64(v, 32))); }

// One super-block of a token quantized to Q8_K as quantize_row_q8_k does, 16 lanes at a time (the
// same values for every input, tested): the value of largest magnitude (the first on ties, NaN
// skipped) sets iscale = -127 / max, q = iscale * x rounded half to even (the conversions' default
// rounding, as nearbyint there), capped to [-128, 127], NaN to 0; d = 1 / iscale.
void quantize_super(const float* v, SuperRecord& r) {
  __m512 x[16];
  __m512 amax = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    x[i] = _mm512_loadu_ps(v + 16 * i);
    // NaN lanes count as zero (|NaN| > amax is false there)
    amax = _mm512_max_ps(amax, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x[i], x[i], _CMP_ORD_Q), _mm512_abs_ps(x[i])));
  }
  const float m = _mm512_reduce_max_ps(amax);
  std::memset(&r, 0, sizeof r);
  if (m == 0.0f) return;  // d = 0, q = 0, sums 0
  float max = 0.0f;
  for (int i = 0; i < 16; ++i) {
    const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(x[i]), _mm512_set1_ps(m), _CMP_EQ_OQ);
    if (at != 0) {
      max = v[16 * i + __builtin_ctz(at)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m512 scale = _mm512_set1_ps(iscale);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    const __m512 p = _mm512_mul_ps(scale, x[i]);
    __m512 q = _mm512_roundscale_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-128.0f)), _mm512_set1_ps(127.0f));
    const __m512i qi = _mm512_cvtps_epi32(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, p, _CMP_ORD_Q), q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.q + 16 * i), _mm512_cvtepi32_epi8(qi));
  }
  r.d = 1.0f / iscale;
  r.no_mins = (0.0f * r.d) * 0.0f;
  // The sums of the values and of their magnitudes, 64 bytes at a time: vpdpbusd with ones adds each
  // 4 bytes, then neighbouring lanes are added pairwise (8-, 16-value sums).
  const __m512i ones = _mm512_set1_epi8(1);
  alignas(64) int32_t bsums[16];  // the 16-value sums
  __m128i abs_max = _mm_setzero_si128();  // the largest 16-value sums of |q|, 4 lanes
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i q = _mm512_loadu_si512(r.q + 64 * k);
    const __m512i fours = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, q);
    const __m512i abs_fours = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), ones);
    const __m256i eights = pairwise_sums(fours);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.start_q6 + 8 * k),
                        _mm256_mullo_epi32(eights, _mm256_set1_epi32(-32)));
    const __m128i sixteens = pairwise_sums(eights);
    _mm_store_si128(reinterpret_cast<__m128i*>(bsums + 4 * k), sixteens);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.start16_q6 + 4 * k), _mm_mullo_epi32(sixteens, _mm_set1_epi32(-32)));
    abs_max = _mm_max_epi32(abs_max, pairwise_sums(pairwise_sums(abs_fours)));
  }
  abs_max = _mm_max_epi32(abs_max, _mm_shuffle_epi32(abs_max, 0x4E));
  abs_max = _mm_max_epi32(abs_max, _mm_shuffle_epi32(abs_max, 0xB1));
  r.q6_narrow = _mm_cvtsi128_si32(abs_max) <= 1023;
  for (int c = 0; c < 4; ++c) {
    // |sum of 32 values| <= 4096: an int16
    const auto lo = static_cast<uint16_t>(bsums[4 * c] + bsums[4 * c + 1]);
    const auto hi = static_cast<uint16_t>(bsums[4 * c + 2] + bsums[4 * c + 3]);
    r.sum_pairs[c] = static_cast<int32_t>(static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16));
  }
  for (int s = 0; s < 8; ++s) r.start_iq4[s] = -128 * (bsums[2 * s] + bsums[2 * s + 1]);
}

void prepare(TensorType, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out) {
  const int blocks = cols / kSuperBlock;
  for (int t0 = 0; t0 < num_tokens; t0 += kMaxTokens) {
    const int tokens = std::min(kMaxTokens, num_tokens - t0);
    auto* group = reinterpret_cast<SuperRecord*>(out + static_cast<size_t>(t0) * token_bytes(cols));
    for (int t = 0; t < tokens; ++t) {
      const float* xt = x + static_cast<size_t>(t0 + t) * x_stride;
      for (int b = 0; b < blocks; ++b)
        quantize_super(xt + static_cast<size_t>(b) * kSuperBlock,
                       group[static_cast<size_t>(b) * static_cast<size_t>(tokens) + static_cast<size_t>(t)]);
    }
  }
}

// ---- unpacking -------------------------------------------------------------------------------------

// Q4_K / Q5_K's packed scales of 16 rows (3 registers: bytes 0-3, 4-7, 8-11 of each row) as two
// registers of 4 bytes per row each: the scales of sub-blocks 0-3 / 4-7 (lo, hi) and the mins.
struct PackedScales {
  __m512i scales_lo, scales_hi, mins_lo, mins_hi;
};

PackedScales decode_scales(const std::byte* at) {
  const __m512i w0 = load(at), w1 = load(at + 64), w2 = load(at + 128);
  const __m512i low6 = bytes(0x3F), low4 = bytes(0x0F), bits45 = bytes(0x30);
  // Sub-blocks 4-7: low 4 bits from bytes 8-11 (scales: low nibbles, mins: high nibbles), high 2
  // bits from the top of bytes 0-3 (scales) or 4-7 (mins).
  return {_mm512_and_si512(w0, low6), or_masked(_mm512_and_si512(w2, low4), _mm512_srli_epi32(w0, 2), bits45),
          _mm512_and_si512(w1, low6),
          or_masked(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4), _mm512_srli_epi32(w1, 2), bits45)};
}

// The 16 rows' scale of sub-block s as int32 lanes.
__m512i scale_of(const PackedScales& p, int s) {
  return _mm512_shuffle_epi8(s < 4 ? p.scales_lo : p.scales_hi, dword_pattern(s % 4, -1, -1, -1));
}
// The mins of sub-blocks 2c and 2c + 1 as an int16 pair per row.
__m512i min_pair(const PackedScales& p, int c) {
  const int j = 2 * (c % 2);
  return _mm512_shuffle_epi8(c < 2 ? p.mins_lo : p.mins_hi, dword_pattern(j, -1, j + 1, -1));
}

// ---- the tiles ---------------------------------------------------------------------------------------

// Tokens whose chains run side by side: 8 (Q4_K, Q5_K, IQ4_XS: one chain per token), 4 (Q6_K: four
// per token; 16 chains, at 32 tokens 1.2x as fast as 2 tokens' 8).
constexpr int kChainGroup = 8, kQ6Group = 4;

// Q4_K / Q5_K: the sums of one super-block of one panel for the tile's tokens, as floats (each
// the float of the exact integer sum: what the scalar twin converts), and the mins.
//   Q5_K: each sub-block's chain times its scale (vpmulld) in int32, converted at the end.
//   Q4_K: in float, with one conversion and one FMA per sub-block instead of vpmulld's two
//     micro-ops on the port that runs vpdpbusd. Exact: a chain is at most 32 * 15 * 128 in
//     magnitude, times a scale <= 63 that is 3.9 M, and two accumulators of 4 sub-blocks each stay
//     below 2^24, so every FMA is exact; adding the two rounds their exact sum once, to nearest
//     even, as the twin's conversion of the integer sum does. The high nibbles are not shifted
//     down: their chains are 16 times the sums (still exact in float), met by the scale / 16
//     (exact too), which saves a shift per register on that same port.
template <TensorType kType, int T>
void sums_q4_k(const std::byte* chunk, const SuperRecord* xb, const SpreadPrefetch& prefetch, __m512 (&sum)[T],
               __m512i (&mins)[T]) {
  constexpr bool kFive = kType == TensorType::kQ5_K;
  const PackedScales packed = decode_scales(chunk + (kFive ? 40 : 32) * 64);
  __m512i isum[T];
  __m512 half[T];  // Q4_K: sub-blocks 0-3's accumulator parked in sum, then 4-7's
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    isum[t] = _mm512_setzero_si512();
    half[t] = _mm512_setzero_ps();
  }
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    prefetch.share(s, 8);
    const int c = s / 2;
    __m512i w[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const __m512i q = load(chunk + (8 * c + v) * 64);
      // Q4_K's high nibbles stay in place (16 times the level; the scale is divided by 16 instead).
      w[v] = s % 2 == 0 ? nibbles<0>(q) : kFive ? nibbles<1>(q) : _mm512_and_si512(q, bytes(0xF0));
      if constexpr (kFive) {  // the fifth bit: bit 2c (low nibbles) or 2c + 1 (high) of the qh byte
        const __m512i h = load(chunk + (32 + v) * 64);
        const __m512i moved = s == 0   ? shift_bits<4>(h)
                              : s == 1 ? shift_bits<3>(h)
                              : s == 2 ? shift_bits<2>(h)
                              : s == 3 ? shift_bits<1>(h)
                              : s == 4 ? shift_bits<0>(h)
                              : s == 5 ? shift_bits<-1>(h)
                              : s == 6 ? shift_bits<-2>(h)
                                       : shift_bits<-3>(h);
        w[v] = or_masked(w[v], moved, bytes(0x10));
      }
    }
    const __m512i scale = scale_of(packed, s);
    const __m512 scale_f =
        s % 2 == 0 ? _mm512_cvtepi32_ps(scale) : _mm512_mul_ps(_mm512_cvtepi32_ps(scale), _mm512_set1_ps(1.0f / 16));
    for_token_groups<T, kChainGroup>([&]<int G>(int t0) {
      __m512i chain[G];
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) chain[g] = _mm512_setzero_si512();
      dot_chains<8>(chain, w, xb + t0, 32 * s);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) {
        if constexpr (kFive) isum[t0 + g] = _mm512_add_epi32(isum[t0 + g], _mm512_mullo_epi32(chain[g], scale));
        else half[t0 + g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(chain[g]), scale_f, half[t0 + g]);
      }
    });
    if (!kFive && s == 3) {
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        sum[t] = half[t];
        half[t] = _mm512_setzero_ps();
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) sum[t] = kFive ? _mm512_cvtepi32_ps(isum[t]) : _mm512_add_ps(sum[t], half[t]);
  __m512i pairs[4];
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) pairs[c] = min_pair(packed, c);
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) m = _mm512_dpwssd_epi32(m, pairs[c], _mm512_set1_epi32(xb[t].sum_pairs[c]));
    mins[t] = m;
  }
}

// Q6_K's repacked levels: triple v of half n (3 registers, 192 bytes) holds columns 128n + 4v..
// in its four byte planes: plane s < 3 (columns + 32s) is the register's low 6 bits, plane 3
// (columns + 96) the top 2 bits of the three registers together.
[[gnu::always_inline]] inline __m512i q6_low_plane(__m512i reg) { return _mm512_and_si512(reg, bytes(0x3F)); }

[[gnu::always_inline]] inline __m512i q6_top_plane(const __m512i (&triple)[3]) {
  // bits 6-7 of the three bytes, as bits 0-1, 2-3, 4-5
  const __m512i low_mid =
      _mm512_ternarylogic_epi32(_mm512_srli_epi16(triple[0], 6), _mm512_srli_epi16(triple[1], 4), bytes(0x03), 0xE4);
  const __m512i all = _mm512_ternarylogic_epi32(low_mid, _mm512_srli_epi16(triple[2], 2), bytes(0x0F), 0xE4);
  return _mm512_and_si512(all, bytes(0x3F));
}

[[gnu::always_inline]] inline const std::byte* q6_triple_at(const std::byte* chunk, int n, int v) {
  return chunk + 3 * (8 * n + v) * 64;
}

[[gnu::always_inline]] inline void load_q6_triple(const std::byte* chunk, int n, int v, __m512i (&triple)[3]) {
  const std::byte* at = q6_triple_at(chunk, n, v);
#pragma GCC unroll 3
  for (int i = 0; i < 3; ++i) triple[i] = load(at + i * 64);
}

// The int8 scale of sub-block sb, for 16 rows, as int16 in the low half of each lane, zeros above
// (vpdpwssd's pairs).
[[gnu::always_inline]] inline __m512i q6_scale_words(const std::byte* chunk, int sb) {
  const std::byte* at = chunk + 48 * 64 + sb * 16;
  return _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(at))));
}

// Q6_K for 1-3 tokens (decode), which memory bounds: the levels are read in the order they lie in,
// two triples (384 bytes) at a time; each gives half a sub-block (8 columns) in all four planes, a
// chain of 2 vpdpbusd per plane and token from -32 times the activation's 8-value sum, times the
// sub-block's scale (vpdpwssd). Plane by plane, the order of the tiles for more tokens, the panel's
// lines are met 4 times over 1.5 KiB apart: on Zen 4 a 1B Q6_K decode step took 39.4 ms at batch 1
// and 48.6 at batch 2, in this order 34.8 and 40.9 (medians of 3 alternated runs); from 4 tokens
// on, where the narrow chains halve the vpdpwssd, plane by plane is faster (batch 4: 43 against 60).
template <int T>
void sums_q6_k_few(const std::byte* chunk, const SuperRecord* xb, const SpreadPrefetch& prefetch, __m512i (&sum)[T]) {
#pragma GCC unroll 2
  for (int n = 0; n < 2; ++n) {
    __m512i scale[8];  // sub-blocks 8n.. 8n + 7
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) scale[k] = q6_scale_words(chunk, 8 * n + k);
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {  // triples 2h, 2h + 1: columns 128n + 32s + 8h.. of plane s
      prefetch.share(4 * n + h, 8);
      __m512i triples[2][3];
      load_q6_triple(chunk, n, 2 * h, triples[0]);
      load_q6_triple(chunk, n, 2 * h + 1, triples[1]);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        __m512i w[2];
#pragma GCC unroll 2
        for (int i = 0; i < 2; ++i) w[i] = s < 3 ? q6_low_plane(triples[i][s]) : q6_top_plane(triples[i]);
        __m512i chain[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) chain[t] = _mm512_set1_epi32(xb[t].start_q6[2 * (8 * n + 2 * s) + h]);
        dot_chains<2>(chain, w, xb, 128 * n + 32 * s + 8 * h);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) sum[t] = _mm512_dpwssd_epi32(sum[t], chain[t], scale[2 * s + h / 2]);
      }
    }
  }
}

// Q6_K for 4-16 tokens: the integer sums (offset included) of one super-block of one panel, plane
// by plane: each unpacked register meets all the tile's tokens.
template <int T>
void sums_q6_k(const std::byte* chunk, const SuperRecord* xb, const SpreadPrefetch& prefetch, __m512i (&sum)[T]) {
#pragma GCC unroll 2
  for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {  // columns 128n + 32s.., sub-blocks 8n + 2s and 8n + 2s + 1
      prefetch.share(4 * n + s, 8);
      __m512i w[8];
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        if (s < 3) {
          w[v] = q6_low_plane(load(q6_triple_at(chunk, n, v) + s * 64));
        } else {
          __m512i triple[3];
          load_q6_triple(chunk, n, v, triple);
          w[v] = q6_top_plane(triple);
        }
      }
      const int sb = 8 * n + 2 * s;
      const __m512i scale0 = q6_scale_words(chunk, sb), scale1 = q6_scale_words(chunk, sb + 1);
      const auto tokens = [&]<int G>(int t0) {
        bool narrow = true;
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) narrow = narrow && xb[t0 + g].q6_narrow;
        if (narrow) {  // a chain per sub-block and token: two vpdpwssd per 32 columns instead of four
          __m512i whole[2][G];
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h)
#pragma GCC unroll 16
            for (int g = 0; g < G; ++g) whole[h][g] = _mm512_set1_epi32(xb[t0 + g].start16_q6[sb + h]);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) dot_chains<4>(whole[h], w + 4 * h, xb + t0, 128 * n + 32 * s + 16 * h);
#pragma GCC unroll 16
          for (int g = 0; g < G; ++g)
            sum[t0 + g] =
                _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sum[t0 + g], whole[0][g], scale0), whole[1][g], scale1);
          return;
        }
        __m512i half[4][G];
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h)
#pragma GCC unroll 16
          for (int g = 0; g < G; ++g) half[h][g] = _mm512_set1_epi32(xb[t0 + g].start_q6[2 * sb + h]);
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) dot_chains<2>(half[h], w + 2 * h, xb + t0, 128 * n + 32 * s + 8 * h);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          __m512i acc = sum[t0 + g];
#pragma GCC unroll 4
          for (int h = 0; h < 4; ++h) acc = _mm512_dpwssd_epi32(acc, half[h][g], h < 2 ? scale0 : scale1);
          sum[t0 + g] = acc;
        }
      };
      for_token_groups<T, kQ6Group>(tokens);
    }
  }
}

// IQ4_XS: the integer sums of one super-block of one panel for the tile's tokens. A level is
// looked up (vpshufb) as kIq4NlValues + 128, unsigned for vpdpbusd; each sub-block's chain starts
// at -128 times the activation's 32-value sum, so that it sums level * x, then meets the
// sub-block's scale - 32 (vpmulld). `high` is the scale block's second half, the rows' scales_h.
template <int T>
void sums_iq4_xs(const std::byte* chunk, const std::byte* high, const SuperRecord* xb, const SpreadPrefetch& prefetch,
                 __m512i (&sum)[T]) {
  const __m512i table = iq4_level_table();
  // Row i's scales_l (4 bytes: sub-block s's low 4 bits at bit 4s) and scales_h (bits 2s, 2s + 1).
  const __m512i low = load(chunk + 32 * 64);
  const __m512i top = _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(high)));
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    prefetch.share(s, 8);
    __m512i w[8];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i q = load(chunk + (4 * s + v) * 64);
      w[v] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, bytes(0x0F)));
      w[4 + v] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), bytes(0x0F)));
    }
    const __m512i top_bits = 2 * s <= 4 ? _mm512_slli_epi32(top, 4 - 2 * s) : _mm512_srli_epi32(top, 2 * s - 4);
    const __m512i scale =
        _mm512_sub_epi32(or_masked(_mm512_and_si512(_mm512_srli_epi32(low, 4 * s), _mm512_set1_epi32(0x0F)), top_bits,
                                   _mm512_set1_epi32(0x30)),
                         _mm512_set1_epi32(32));
    for_token_groups<T, kChainGroup>([&]<int G>(int t0) {
      __m512i chain[G];
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) chain[g] = _mm512_set1_epi32(xb[t0 + g].start_iq4[s]);
      dot_chains<8>(chain, w, xb + t0, 32 * s);
#pragma GCC unroll 16
      for (int g = 0; g < G; ++g) sum[t0 + g] = _mm512_add_epi32(sum[t0 + g], _mm512_mullo_epi32(chain[g], scale));
    });
  }
}

// A format's tiles: P panels x the T tokens of group `x` (SuperRecords, T per super-block) through
// super_block_tile; per super-block the format's sums, then the scalar twin's float step: acc +=
// (d * d_x) * sum - (dmin * d_x) * mins; for Q6_K and IQ4_XS, whose dmin and mins are zero, the
// subtrahend is the token's no_mins.
template <TensorType kType>
struct KQuantFormat {
  using X = SuperRecord;
  template <int P, int T>
  static void tile(const std::byte* panel, const PanelLayout& l, const X* x, float* y, size_t y_stride,
                   const int* rows_out) {
    constexpr bool kMins = kType == TensorType::kQ4_K || kType == TensorType::kQ5_K;
    const auto add_super_block = [](const std::byte* chunk, const std::byte* ds, const X* xb, __m512* acc,
                                    const SpreadPrefetch& prefetch) __attribute__((always_inline)) {
      __m512 sum[T];
      __m512i mins[T];
      if constexpr (kMins) {
        sums_q4_k<kType, T>(chunk, xb, prefetch, sum, mins);
      } else {
        __m512i isum[T];
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
        if constexpr (kType == TensorType::kIQ4_XS) sums_iq4_xs<T>(chunk, ds + 32, xb, prefetch, isum);
        else if constexpr (T < 4) sums_q6_k_few<T>(chunk, xb, prefetch, isum);
        else sums_q6_k<T>(chunk, xb, prefetch, isum);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) sum[t] = _mm512_cvtepi32_ps(isum[t]);
      }
      add_float_step<kMins, T>(acc, ds, xb, sum, mins);
    };
    super_block_tile<kType, P, T>(panel, l, x, y, y_stride, rows_out, add_super_block);
  }
};

// ---- the driver ----------------------------------------------------------------------------------

template <TensorType kType>
using KQuantKernel = SuperBlockKernel<KQuantFormat<kType>>;

void multiply_panels(const WeightPanels& w, int p0, int p1, const Activations& x, float* y, size_t y_stride) {
  switch (w.layout.type) {
    case TensorType::kQ4_K:
      return multiply_panels_with<KQuantKernel<TensorType::kQ4_K>>(w, p0, p1, x, y, y_stride);
    case TensorType::kQ5_K:
      return multiply_panels_with<KQuantKernel<TensorType::kQ5_K>>(w, p0, p1, x, y, y_stride);
    case TensorType::kIQ4_XS:
      return multiply_panels_with<KQuantKernel<TensorType::kIQ4_XS>>(w, p0, p1, x, y, y_stride);
    default:
      return multiply_panels_with<KQuantKernel<TensorType::kQ6_K>>(w, p0, p1, x, y, y_stride);
  }
}

}  // namespace

const PanelsKernel& avx512_k_quant_panels_kernel() {
  static const PanelsKernel k{prepared_bytes, prepare, multiply_panels};
  return k;
}

}  // namespace pagedkv::quant_detail
