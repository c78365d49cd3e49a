// The SIMD builds of block_dot.h's products, as one source compiled twice: by block_dot_avx2.cpp
// (AVX2) and block_dot_avx512.cpp (AVX-512 VL with VNNI: the legacy blocks' byte products use
// vpdpbusd). Private to src/model/quant; every function is internal to the translation unit that
// includes it.
//
// A weight block is unpacked once into 32-byte vectors of levels (unsigned where the format's
// levels are, its offset such as Q6_K's 32 taken out afterwards against the activation sums) and
// 16-bit sub-block scales, then multiplied with the activations of up to kTileTokens tokens.
// Every block's integer sums are exact, and they are combined in float with the scalar twin's very
// operations (these files are compiled without fused multiply-adds), so the SIMD builds give the
// scalar twin's results bit for bit.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "block_dot.h"
#include "pagedkv/model/format/block_formats.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv::quant_detail {
namespace {

constexpr int kTileTokens = 8;

int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// acc + the products u[i] * s[i] of 32 bytes (u unsigned, s signed), those of the first 16 bytes
// times the scale in the low 128 bits of `scales`, those of the last 16 times the one in the high
// 128 bits, in 8 int32 lanes (lanes 0-3 hold the first 16 bytes' products).
__m256i scaled_dot(__m256i acc, __m256i u, __m256i s, __m256i scales) {
  // maddubs: adjacent pairs into int16 (u <= 127 and |s| <= 127, so a pair stays below 32767),
  // then madd with the scales into int32. (vpdpbusd would need a 32-bit multiply by the scales
  // afterwards, measured slower.)
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scales));
}

__m256i nibbles_low(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
__m256i nibbles_high(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
// Bits k..k+width-1 of every byte (k + width <= 8), as the byte's value.
__m256i bits(__m256i v, int k, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(k)), _mm256_set1_epi8(static_cast<char>(mask)));
}
__m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// fp16 to f32 with F16C (both builds have it): exact, as f16_to_f32, in one instruction.
float half(uint16_t h) { return _cvtsh_ss(h); }

// The 16-bit scale vectors of the 8 chunks of 32 values from the 16 byte-sized scales of the
// 16-value groups (group k's in byte k; signed or unsigned): chunk c's low half gets group 2c's,
// its high half group 2c + 1's.
void scale_vectors(__m128i scales8, bool is_signed, __m256i* out) {
  alignas(16) static constexpr uint8_t kPairs[8][16] = {
      {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
      {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
      {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
      {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
      {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
      {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
      {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
      {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};
  for (int c = 0; c < 8; ++c) {
    const __m128i pair = _mm_shuffle_epi8(scales8, load16(kPairs[c]));
    out[c] = is_signed ? _mm256_cvtepi8_epi16(pair) : _mm256_cvtepu8_epi16(pair);
  }
}

// Bytes 0..7 of a 16-byte vector, each twice: one scale per 32 values made one per 16.
__m128i each_twice(__m128i v) { return _mm_unpacklo_epi8(v, v); }

// Q4_K / Q5_K's twelve scale bytes as eight 6-bit scales (bytes 0..7) and eight 6-bit mins
// (bytes 8..15), q4_k_scale_min for all sub-blocks at once: sub-blocks 0-3 keep the low 6 bits
// of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take the nibbles of bytes 8-11 as their
// low 4 bits and the top 2 bits of bytes 0-3 (scales) or 4-7 (mins) as their high 2.
__m128i q4_k_scales_and_mins(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  constexpr uint32_t kLow6 = 0x3F3F3F3F, kLow4 = 0x0F0F0F0F, kLow2 = 0x03030303;
  const uint32_t scales_lo = w[0] & kLow6, mins_lo = w[1] & kLow6;
  const uint32_t scales_hi = (w[2] & kLow4) | (((w[0] >> 6) & kLow2) << 4);
  const uint32_t mins_hi = ((w[2] >> 4) & kLow4) | (((w[1] >> 6) & kLow2) << 4);
  return _mm_setr_epi32(static_cast<int>(scales_lo), static_cast<int>(scales_hi), static_cast<int>(mins_lo),
                        static_cast<int>(mins_hi));
}

// One K-quant / IQ4_XS super-block, unpacked.
struct SuperBlock {
  __m256i levels[8];  // values 32c..32c+31
  __m256i scales[8];  // their 16-value groups' scales (scale_vectors)
  __m256i corr;  // 16 int16 coefficients of the activation's 16-value sums
  bool signed_levels;  // IQ4_XS: levels are signed (the sign trick), else unsigned
  bool corr_is_min;  // corr is the mins (times dmin) rather than an offset of the levels
  float d, dmin;
};

void unpack_super(TensorType t, const std::byte* block, SuperBlock& u) {
  u.signed_levels = false;
  u.corr_is_min = false;
  u.dmin = 0.0f;
  switch (t) {
    case TensorType::kQ2_K: {
      const auto& b = *reinterpret_cast<const BlockQ2_K*>(block);
      for (int n = 0; n < 2; ++n) {
        const __m256i q = load32(b.qs + n * 32);
        for (int s = 0; s < 4; ++s) u.levels[n * 4 + s] = bits(q, 2 * s, 3);
      }
      const __m128i packed = load16(b.scales), low4 = _mm_set1_epi8(0x0F);
      scale_vectors(_mm_and_si128(packed, low4), false, u.scales);
      u.corr = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low4));
      u.corr_is_min = true;
      u.d = half(b.d);
      u.dmin = half(b.dmin);
      return;
    }
    case TensorType::kQ3_K: {
      const auto& b = *reinterpret_cast<const BlockQ3_K*>(block);
      const __m256i hm = load32(b.hmask);
      for (int n = 0; n < 2; ++n) {
        const __m256i q = load32(b.qs + n * 32);
        for (int s = 0; s < 4; ++s)  // level + 4: the high bit set means "no -4"
          u.levels[n * 4 + s] = _mm256_or_si256(bits(q, 2 * s, 3), _mm256_slli_epi16(bits(hm, n * 4 + s, 1), 2));
      }
      int8_t sc[16];
      unpack_q3_k_scales(b.scales, sc);
      const __m128i scales = _mm_sub_epi8(load16(sc), _mm_set1_epi8(32));
      scale_vectors(scales, true, u.scales);
      u.corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales), 2);  // the levels' offset 4
      u.d = half(b.d);
      return;
    }
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: {
      const uint16_t* dm = reinterpret_cast<const uint16_t*>(block);
      const uint8_t* packed = reinterpret_cast<const uint8_t*>(block) + 4;
      const bool five = t == TensorType::kQ5_K;
      const uint8_t* qs =
          five ? reinterpret_cast<const BlockQ5_K*>(block)->qs : reinterpret_cast<const BlockQ4_K*>(block)->qs;
      const __m256i qh = five ? load32(reinterpret_cast<const BlockQ5_K*>(block)->qh) : _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i q = load32(qs + c * 32);
        u.levels[2 * c] = nibbles_low(q);
        u.levels[2 * c + 1] = nibbles_high(q);
        if (five) {
          u.levels[2 * c] = _mm256_or_si256(u.levels[2 * c], _mm256_slli_epi16(bits(qh, 2 * c, 1), 4));
          u.levels[2 * c + 1] = _mm256_or_si256(u.levels[2 * c + 1], _mm256_slli_epi16(bits(qh, 2 * c + 1, 1), 4));
        }
      }
      const __m128i scales_mins = q4_k_scales_and_mins(packed);
      scale_vectors(each_twice(scales_mins), false, u.scales);
      u.corr = _mm256_cvtepu8_epi16(each_twice(_mm_srli_si128(scales_mins, 8)));
      u.corr_is_min = true;
      u.d = half(dm[0]);
      u.dmin = half(dm[1]);
      return;
    }
    case TensorType::kQ6_K: {
      const auto& b = *reinterpret_cast<const BlockQ6_K*>(block);
      for (int n = 0; n < 2; ++n) {
        const __m256i l0 = load32(b.ql + n * 64), l1 = load32(b.ql + n * 64 + 32), h = load32(b.qh + n * 32);
        const __m256i low[4] = {nibbles_low(l0), nibbles_low(l1), nibbles_high(l0), nibbles_high(l1)};
        for (int s = 0; s < 4; ++s)  // level + 32
          u.levels[n * 4 + s] = _mm256_or_si256(low[s], _mm256_slli_epi16(bits(h, 2 * s, 3), 4));
      }
      const __m128i scales = load16(b.scales);
      scale_vectors(scales, true, u.scales);
      u.corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales), 5);  // the levels' offset 32
      u.d = half(b.d);
      return;
    }
    case TensorType::kIQ4_XS: {
      const auto& b = *reinterpret_cast<const BlockIQ4_XS*>(block);
      const __m256i table =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
      for (int p = 0; p < 4; ++p) {  // 32 bytes: sub-blocks 2p (low 128 bits) and 2p + 1
        const __m256i q = load32(b.qs + p * 32);
        const __m256i lo = _mm256_shuffle_epi8(table, nibbles_low(q)), hi = _mm256_shuffle_epi8(table, nibbles_high(q));
        u.levels[2 * p] = _mm256_permute2x128_si256(lo, hi, 0x20);
        u.levels[2 * p + 1] = _mm256_permute2x128_si256(lo, hi, 0x31);
      }
      alignas(16) int8_t sc[16] = {};
      for (int s = 0; s < 8; ++s) sc[s] = static_cast<int8_t>(iq4_xs_scale(b, s) - 32);
      scale_vectors(each_twice(load16(sc)), true, u.scales);
      u.corr = _mm256_setzero_si256();
      u.signed_levels = true;
      u.d = half(b.d);
      return;
    }
    default:  // not a super-block format: callers never get here
      for (int c = 0; c < 8; ++c) u.levels[c] = u.scales[c] = _mm256_setzero_si256();
      u.corr = _mm256_setzero_si256();
      u.d = 0.0f;
      return;
  }
}

// (levels . activations with scales) - offset corrections, and the mins against the 16-value sums.
void super_dot(const SuperBlock& u, const BlockQ8_K& a, int& sum, int& mins) {
  __m256i acc = _mm256_setzero_si256();
  if (u.signed_levels) {
    for (int c = 0; c < 8; ++c) {
      const __m256i x = load32(a.qs + 32 * c);
      acc = scaled_dot(acc, _mm256_sign_epi8(u.levels[c], u.levels[c]), _mm256_sign_epi8(x, u.levels[c]), u.scales[c]);
    }
  } else {
    for (int c = 0; c < 8; ++c) acc = scaled_dot(acc, u.levels[c], load32(a.qs + 32 * c), u.scales[c]);
  }
  sum = hsum_i32(acc);
  const int corr = hsum_i32(_mm256_madd_epi16(u.corr, load32(a.bsums)));
  if (u.corr_is_min) {
    mins = corr;
  } else {
    sum -= corr;
    mins = 0;
  }
}

// One legacy 32-value block's levels: unsigned (Q4_1, Q5_1) or signed (Q5_0, IQ4_NL).
__m256i unpack_legacy(TensorType t, const std::byte* block) {
  const uint8_t* qs = reinterpret_cast<const uint8_t*>(block) + (t == TensorType::kQ4_1   ? 4
                                                                 : t == TensorType::kQ5_0 ? 6
                                                                 : t == TensorType::kQ5_1 ? 8
                                                                                          : 2);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  __m256i q = _mm256_setr_m128i(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
  if (t == TensorType::kIQ4_NL)
    return _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues))), q);
  if (t == TensorType::kQ5_0 || t == TensorType::kQ5_1) {
    uint32_t qh = 0;
    std::memcpy(&qh, reinterpret_cast<const uint8_t*>(block) + (t == TensorType::kQ5_0 ? 2 : 4), 4);
    // Byte j gets bit j of qh: spread the 32 bits one per byte, then keep each byte's own bit.
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                            _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
    q = _mm256_or_si256(q, high);
    if (t == TensorType::kQ5_0) q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
  }
  return q;
}

// The sums of w[i] * x[i] over 32 bytes, in 8 int32 lanes; signed weights (Q5_0, IQ4_NL) meet x
// carrying their sign.
template <bool kSigned>
__m256i legacy_products(__m256i w, __m256i x) {
  const __m256i u = kSigned ? _mm256_sign_epi8(w, w) : w;
  const __m256i s = kSigned ? _mm256_sign_epi8(x, w) : x;
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// The lane sums of 8 vectors at once: {sum(v[0]), ..., sum(v[7])}.
__m256i hsum8_i32(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // a = {v0..v3 over lanes 0-3 | v0..v3 over lanes 4-7}, b likewise for v4..v7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// K-quant / IQ4_XS rows: a super-block unpacked once for the tile's tokens.
void super_rows(TensorType type, const std::byte* w, int blocks, size_t block_bytes, const std::byte* acts,
                size_t act_stride, int t0, int tn, float* acc) {
  for (int b = 0; b < blocks; ++b) {
    SuperBlock u;
    unpack_super(type, w + static_cast<size_t>(b) * block_bytes, u);
    for (int t = 0; t < tn; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8_K*>(acts + static_cast<size_t>(t0 + t) * act_stride) + b;
      int sum = 0, mins = 0;
      super_dot(u, *a, sum, mins);
      acc[t] += (u.d * a->d) * static_cast<float>(sum) - (u.dmin * a->d) * static_cast<float>(mins);
    }
  }
}

// Legacy rows (32-value blocks): 8 blocks unpacked at a time, their 8 integer sums per token
// reduced together, then added in block order as the scalar twin does. One instance per type, so
// that the per-type choices are made at compile time.
template <TensorType kType>
void legacy_rows(const std::byte* w, int blocks, size_t block_bytes, const std::byte* acts, size_t act_stride, int t0,
                 int tn, float* acc) {
  constexpr TensorType type = kType;
  constexpr bool with_q8_1 = type == TensorType::kQ4_1 || type == TensorType::kQ5_1;
  constexpr bool signed_levels = type == TensorType::kQ5_0 || type == TensorType::kIQ4_NL;
  for (int b0 = 0; b0 < blocks; b0 += 8) {
    const int nb = std::min(8, blocks - b0);
    __m256i levels[8];
    float d[8], m[8];
    for (int i = 0; i < nb; ++i) {
      const std::byte* wb = w + static_cast<size_t>(b0 + i) * block_bytes;
      levels[i] = unpack_legacy(type, wb);
      const uint16_t* dm = reinterpret_cast<const uint16_t*>(wb);
      d[i] = half(dm[0]);
      if constexpr (with_q8_1) m[i] = half(dm[1]);
    }
    for (int t = 0; t < tn; ++t) {
      const std::byte* xt = acts + static_cast<size_t>(t0 + t) * act_stride;
      // Q8_0 and Q8_1 blocks both end with their 32 quants: 34 and 36 bytes.
      constexpr size_t x_bytes = with_q8_1 ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0);
      __m256i products[8];
      for (int i = 0; i < nb; ++i)
        products[i] = legacy_products<signed_levels>(
            levels[i], load32(xt + static_cast<size_t>(b0 + i) * x_bytes + (x_bytes - 32)));
      alignas(32) int sums[8];
      if (nb == 8) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(sums), hsum8_i32(products));
      } else {
        for (int i = 0; i < nb; ++i) sums[i] = hsum_i32(products[i]);
      }
      for (int i = 0; i < nb; ++i) {
        if constexpr (with_q8_1) {
          const auto& a = reinterpret_cast<const BlockQ8_1*>(xt)[b0 + i];
          acc[t] += static_cast<float>(sums[i]) * (d[i] * half(a.d)) + m[i] * half(a.s);
        } else {
          const auto& a = reinterpret_cast<const BlockQ8_0*>(xt)[b0 + i];
          acc[t] += static_cast<float>(sums[i]) * (d[i] * half(a.d));
        }
      }
    }
  }
}

void simd_block_rows(TensorType type, const std::byte* base, size_t row_bytes, int cols, int r0, int r1,
                     const std::byte* acts, size_t act_stride, int num_tokens, float* y, size_t y_stride) {
  const auto traits = *tensor_type_traits(static_cast<uint32_t>(type));
  const int blocks = cols / traits.block_elements;
  const size_t block_bytes = static_cast<size_t>(traits.block_bytes);
  const bool super = activation_type(type) == TensorType::kQ8_K;
  for (int r = r0; r < r1; ++r) {
    const std::byte* w = base + static_cast<size_t>(r) * row_bytes;
    for (int t0 = 0; t0 < num_tokens; t0 += kTileTokens) {
      const int tn = std::min(kTileTokens, num_tokens - t0);
      float acc[kTileTokens] = {};
      if (super) super_rows(type, w, blocks, block_bytes, acts, act_stride, t0, tn, acc);
      else if (type == TensorType::kQ4_1)
        legacy_rows<TensorType::kQ4_1>(w, blocks, block_bytes, acts, act_stride, t0, tn, acc);
      else if (type == TensorType::kQ5_0)
        legacy_rows<TensorType::kQ5_0>(w, blocks, block_bytes, acts, act_stride, t0, tn, acc);
      else if (type == TensorType::kQ5_1)
        legacy_rows<TensorType::kQ5_1>(w, blocks, block_bytes, acts, act_stride, t0, tn, acc);
      else legacy_rows<TensorType::kIQ4_NL>(w, blocks, block_bytes, acts, act_stride, t0, tn, acc);
      for (int t = 0; t < tn; ++t) y[static_cast<size_t>(t0 + t) * y_stride + static_cast<size_t>(r)] = acc[t];
    }
  }
}

}  // namespace
}  // namespace pagedkv::quant_detail
