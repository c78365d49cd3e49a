// The SIMD builds of block_dot.h's products, as one source compiled twice: by block_dot_avx2.cpp
// (AVX2) and block_dot_avx512.cpp (AVX-512 VL with VNNI: the byte products use vpdpbusd). Private
// to src/model/quant; every function is internal to the translation unit that includes it.
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
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  // vpdpbusd sums groups of 4 byte products into int32 lanes: lanes 0-3 are the first 16 values.
  const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  return _mm256_add_epi32(acc, _mm256_mullo_epi32(p, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(
                                                         _mm256_permute4x64_epi64(scales, 0x88)))));
#else
  // maddubs: adjacent pairs into int16 (|u| <= 127 or u <= 63 here, so no saturation), then
  // madd with the scales into int32.
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scales));
#endif
}

__m256i nibbles_low(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
__m256i nibbles_high(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
// Bits k..k+width-1 of every byte (k + width <= 8), as the byte's value.
__m256i bits(__m256i v, int k, int mask) { return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(k)), _mm256_set1_epi8(static_cast<char>(mask))); }
__m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m256i scale_pair(int lo, int hi) {
  return _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(lo)), _mm_set1_epi16(static_cast<int16_t>(hi)));
}

// One K-quant / IQ4_XS super-block, unpacked.
struct SuperBlock {
  __m256i levels[8];   // values 32c..32c+31
  __m256i scales[8];   // their 16-value scales (scale_pair)
  int16_t corr[16];    // coefficients of the activation's 16-value sums
  bool signed_levels;  // IQ4_XS: levels are signed (the sign trick), else unsigned
  bool corr_is_min;    // corr is the mins (times dmin) rather than an offset of the levels
  float d, dmin;
};

void unpack_super(TensorType t, const std::byte* block, SuperBlock& u) {
  u.signed_levels = false;
  u.corr_is_min = false;
  u.dmin = 0.0f;
  std::memset(u.corr, 0, sizeof u.corr);
  switch (t) {
    case TensorType::kQ2_K: {
      const auto& b = *reinterpret_cast<const BlockQ2_K*>(block);
      for (int n = 0; n < 2; ++n) {
        const __m256i q = load32(b.qs + n * 32);
        for (int s = 0; s < 4; ++s) u.levels[n * 4 + s] = bits(q, 2 * s, 3);
      }
      for (int c = 0; c < 8; ++c) u.scales[c] = scale_pair(b.scales[2 * c] & 0xF, b.scales[2 * c + 1] & 0xF);
      for (int k = 0; k < 16; ++k) u.corr[k] = static_cast<int16_t>(b.scales[k] >> 4);
      u.corr_is_min = true;
      u.d = f16_to_f32(b.d);
      u.dmin = f16_to_f32(b.dmin);
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
      for (int c = 0; c < 8; ++c) u.scales[c] = scale_pair(sc[2 * c] - 32, sc[2 * c + 1] - 32);
      for (int k = 0; k < 16; ++k) u.corr[k] = static_cast<int16_t>(4 * (sc[k] - 32));
      u.d = f16_to_f32(b.d);
      return;
    }
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: {
      const uint16_t* dm = reinterpret_cast<const uint16_t*>(block);
      const uint8_t* packed = reinterpret_cast<const uint8_t*>(block) + 4;
      const bool five = t == TensorType::kQ5_K;
      const uint8_t* qs = five ? reinterpret_cast<const BlockQ5_K*>(block)->qs : reinterpret_cast<const BlockQ4_K*>(block)->qs;
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
      for (int s = 0; s < 8; ++s) {
        uint8_t sc = 0, mn = 0;
        q4_k_scale_min(s, packed, sc, mn);
        u.scales[s] = scale_pair(sc, sc);
        u.corr[2 * s] = u.corr[2 * s + 1] = static_cast<int16_t>(mn);
      }
      u.corr_is_min = true;
      u.d = f16_to_f32(dm[0]);
      u.dmin = f16_to_f32(dm[1]);
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
      for (int c = 0; c < 8; ++c) u.scales[c] = scale_pair(b.scales[2 * c], b.scales[2 * c + 1]);
      for (int k = 0; k < 16; ++k) u.corr[k] = static_cast<int16_t>(32 * b.scales[k]);
      u.d = f16_to_f32(b.d);
      return;
    }
    case TensorType::kIQ4_XS: {
      const auto& b = *reinterpret_cast<const BlockIQ4_XS*>(block);
      const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
      for (int p = 0; p < 4; ++p) {  // 32 bytes: sub-blocks 2p (low 128 bits) and 2p + 1
        const __m256i q = load32(b.qs + p * 32);
        const __m256i lo = _mm256_shuffle_epi8(table, nibbles_low(q)), hi = _mm256_shuffle_epi8(table, nibbles_high(q));
        u.levels[2 * p] = _mm256_permute2x128_si256(lo, hi, 0x20);
        u.levels[2 * p + 1] = _mm256_permute2x128_si256(lo, hi, 0x31);
      }
      for (int s = 0; s < 8; ++s) u.scales[s] = scale_pair(iq4_xs_scale(b, s) - 32, iq4_xs_scale(b, s) - 32);
      u.signed_levels = true;
      u.d = f16_to_f32(b.d);
      return;
    }
    default:  // not a super-block format: callers never get here
      for (int c = 0; c < 8; ++c) u.levels[c] = u.scales[c] = _mm256_setzero_si256();
      u.d = 0.0f;
      return;
  }
}

// (levels . activations with scales) - offset corrections, and the mins against the 16-value sums.
void super_dot(const SuperBlock& u, const BlockQ8_K& a, int& sum, int& mins) {
  __m256i acc = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    const __m256i x = load32(a.qs + 32 * c);
    if (u.signed_levels)
      acc = scaled_dot(acc, _mm256_sign_epi8(u.levels[c], u.levels[c]), _mm256_sign_epi8(x, u.levels[c]), u.scales[c]);
    else
      acc = scaled_dot(acc, u.levels[c], x, u.scales[c]);
  }
  sum = hsum_i32(acc);
  const int corr = hsum_i32(_mm256_madd_epi16(load32(u.corr), load32(a.bsums)));
  if (u.corr_is_min) {
    mins = corr;
  } else {
    sum -= corr;
    mins = 0;
  }
}

// One legacy 32-value block's levels: unsigned (Q4_1, Q5_1) or signed (Q5_0, IQ4_NL).
__m256i unpack_legacy(TensorType t, const std::byte* block) {
  const uint8_t* qs = reinterpret_cast<const uint8_t*>(block) + (t == TensorType::kQ4_1 ? 4 : t == TensorType::kQ5_0 ? 6 : t == TensorType::kQ5_1 ? 8 : 2);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  __m256i q = _mm256_setr_m128i(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
  if (t == TensorType::kIQ4_NL)
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues))), q);
  if (t == TensorType::kQ5_0 || t == TensorType::kQ5_1) {
    uint32_t qh = 0;
    std::memcpy(&qh, reinterpret_cast<const uint8_t*>(block) + (t == TensorType::kQ5_0 ? 2 : 4), 4);
    // Byte j gets bit j of qh: spread the 32 bits one per byte, then keep each byte's own bit.
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                                               _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
    q = _mm256_or_si256(q, high);
    if (t == TensorType::kQ5_0) q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
  }
  return q;
}

int legacy_dot(TensorType t, __m256i w, const int8_t* x) {
  const __m256i a = load32(x);
  const __m256i ones = _mm256_set1_epi16(1);
  if (t == TensorType::kQ5_0 || t == TensorType::kIQ4_NL)
    return hsum_i32(scaled_dot(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w), ones));
  return hsum_i32(scaled_dot(_mm256_setzero_si256(), w, a, ones));
}

void simd_block_rows(TensorType type, const std::byte* base, size_t row_bytes, int cols, int r0, int r1,
                     const std::byte* acts, size_t act_stride, int num_tokens, float* y, size_t y_stride) {
  const auto traits = *tensor_type_traits(static_cast<uint32_t>(type));
  const int blocks = cols / traits.block_elements;
  const size_t block_bytes = static_cast<size_t>(traits.block_bytes);
  const TensorType act_type = activation_type(type);
  for (int r = r0; r < r1; ++r) {
    const std::byte* w = base + static_cast<size_t>(r) * row_bytes;
    for (int t0 = 0; t0 < num_tokens; t0 += kTileTokens) {
      const int tn = std::min(kTileTokens, num_tokens - t0);
      float acc[kTileTokens] = {};
      for (int b = 0; b < blocks; ++b) {
        const std::byte* wb = w + static_cast<size_t>(b) * block_bytes;
        if (act_type == TensorType::kQ8_K) {
          SuperBlock u;
          unpack_super(type, wb, u);
          for (int t = 0; t < tn; ++t) {
            const auto* a = reinterpret_cast<const BlockQ8_K*>(acts + static_cast<size_t>(t0 + t) * act_stride) + b;
            int sum = 0, mins = 0;
            super_dot(u, *a, sum, mins);
            acc[t] += (u.d * a->d) * static_cast<float>(sum) - (u.dmin * a->d) * static_cast<float>(mins);
          }
        } else {
          const __m256i lv = unpack_legacy(type, wb);
          const uint16_t* dm = reinterpret_cast<const uint16_t*>(wb);
          const float d = f16_to_f32(dm[0]);
          for (int t = 0; t < tn; ++t) {
            const std::byte* xt = acts + static_cast<size_t>(t0 + t) * act_stride;
            if (act_type == TensorType::kQ8_0) {
              const auto& a = reinterpret_cast<const BlockQ8_0*>(xt)[b];
              acc[t] += static_cast<float>(legacy_dot(type, lv, a.q)) * (d * f16_to_f32(a.d));
            } else {
              const auto& a = reinterpret_cast<const BlockQ8_1*>(xt)[b];
              acc[t] += static_cast<float>(legacy_dot(type, lv, a.qs)) * (d * f16_to_f32(a.d)) +
                        f16_to_f32(dm[1]) * f16_to_f32(a.s);
            }
          }
        }
      }
      for (int t = 0; t < tn; ++t) y[static_cast<size_t>(t0 + t) * y_stride + static_cast<size_t>(r)] = acc[t];
    }
  }
}

}  // namespace
}  // namespace pagedkv::quant_detail
