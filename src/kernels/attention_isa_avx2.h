// The AVX2+FMA+F16C vector ISA of the SIMD attention kernel (attention_tile_simd.h): 8-lane
// vectors, score blocks of 4 rows x 3 tokens and value strips of 4 rows x 3 vectors, 12
// accumulators each (of 16 YMM registers; 4 x 4 spills). kVnni: the int8 path's dot products
// with AVX-VNNI's vpdpwssd and vpdpbusd (attention_tile_vnni_avx2.cpp, built with -mavxvnni)
// instead of vpmaddwd + vpaddd; the results are the same.
// Included only by translation units built with the AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pagedkv::attention_detail {
namespace {

template <bool kVnni>
struct Avx2Isa {
  using Vec = __m256;
  using IVec = __m256i;
  static constexpr int kLanes = 8;
  static constexpr int kScoreTokens = 3;
  // Per block: per-iteration prefetching measured ~1 GB/s slower for fp16 here (the score block
  // already uses all 16 YMM registers).
  static constexpr bool kPrefetchInLoops = false;
  static constexpr int kValueChunks = 3;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Vec load_bf16(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static Vec load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // fp8 e4m3 -> f16 bits (sign-extend the byte, shift the exponent and mantissa into place and
  // clear bit 14, which the sign extension set), then F16C: exact, value * 2^-8 (the f16 bias is
  // 8 more than e4m3's), subnormals included. The NaN codes are never stored by write_kv.
  static Vec load_fp8(const uint8_t* p) {
    const __m128i wide = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m128i half = _mm_and_si128(_mm_slli_epi16(wide, 7), _mm_set1_epi16(static_cast<short>(0xBF80)));
    return _mm256_cvtph_ps(half);
  }
  static __m256 fold(Vec v) { return v; }

  // The int8 path (attention_tile_int8.h). A key chunk is kPairDims int16 (16 codes). A value
  // group is kQuadDims dimensions of four tokens, their codes interleaved per dimension as the four
  // bytes of a 32-bit lane (vpdpbusd's layout), in kQuadVecs vectors of 8 dimensions, in natural
  // order (built from 128-bit unpacks); the tail of a head goes kTailDims at a time.
  static constexpr int kPairDims = 16;
  // Tokens per int8 score block of 4 rows: vpdpwssd adds in place, so 12 accumulators + 3 keys +
  // the query fill the 16 registers; vpmaddwd + vpaddd need a register for each product, and with
  // 3 tokens GCC spilled an accumulator for about every product (117 stores and reloads per 96
  // vpmaddwd), so 2 tokens (8 accumulators) without VNNI.
  static constexpr int kIntScoreTokens = kVnni ? 3 : 2;
  static constexpr int kQuadDims = 16;
  static constexpr int kQuadVecs = 2;  // 4 rows x 2 accumulators
  static constexpr int kTailDims = 8;
  static constexpr bool kQuadsPermuted = false;
  // Without VNNI the value blocks take tokens in pairs instead (pv_block_int8_pairs): emulating
  // vpdpbusd costs about nine instructions (byte splits, two vpmaddwd, two adds) per product vector
  // and spilled; two tokens' codes widened to int16 pairs once per quad and multiplied by their two
  // weight codes (int16) with one vpmaddwd and one add per vector give the same int32 sums.
  static constexpr bool kPairedValues = !kVnni;
  static IVec izero() { return _mm256_setzero_si256(); }
  static IVec load_k16(const int8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static IVec load_k16_half(const int8_t* p) {  // kLanes codes, the upper half zero
    return _mm256_zextsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static IVec load_q16(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static IVec dpwssd(IVec acc, IVec a, IVec b) {
    if constexpr (kVnni) {
#ifdef __AVXVNNI__
      // As Avx512Isa::dpwssd: the asm keeps GCC 12 from copying the accumulators around the loops;
      // {vex}: the AVX-VNNI encoding (the EVEX one needs AVX512-VNNI + VL).
      __asm__("%{vex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(a), "xm"(b));
      return acc;
#endif
    }
    return madd_add(acc, a, b);
  }
  static __m256i fold_i(IVec v) { return v; }
  // As Avx512Isa::dpbusd (AVX-VNNI's vpdpbusd, or two vpmaddwd).
  static IVec dpbusd(IVec acc, IVec a, IVec b) {
    if constexpr (kVnni) {
#ifdef __AVXVNNI__
      __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "xm"(b));
      return acc;
#endif
    }
    const IVec a_even = _mm256_and_si256(a, _mm256_set1_epi16(0x00FF)), a_odd = _mm256_srli_epi16(a, 8);
    const IVec b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8), b_odd = _mm256_srai_epi16(b, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even), _mm256_madd_epi16(a_odd, b_odd)));
  }
  static void interleave_quad(const int8_t* const* v, size_t d, IVec (&out)[kQuadVecs]) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[0] + d));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[1] + d));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[2] + d));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[3] + d));
    const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
    const __m128i ce_lo = _mm_unpacklo_epi8(c, e), ce_hi = _mm_unpackhi_epi8(c, e);
    out[0] = _mm256_set_m128i(_mm_unpackhi_epi16(ab_lo, ce_lo), _mm_unpacklo_epi16(ab_lo, ce_lo));
    out[1] = _mm256_set_m128i(_mm_unpackhi_epi16(ab_hi, ce_hi), _mm_unpacklo_epi16(ab_hi, ce_hi));
  }
  static IVec interleave_quad_tail(const int8_t* const* v, size_t d) {
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[0] + d));
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[1] + d));
    const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[2] + d));
    const __m128i e = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[3] + d));
    const __m128i ab = _mm_unpacklo_epi8(a, b), ce = _mm_unpacklo_epi8(c, e);
    return _mm256_set_m128i(_mm_unpackhi_epi16(ab, ce), _mm_unpacklo_epi16(ab, ce));
  }
  static IVec broadcast_quad(const uint8_t* w) {
    int32_t quad;
    __builtin_memcpy(&quad, w, sizeof quad);
    return _mm256_set1_epi32(quad);
  }
  // Dimensions [d, d + kQuadDims) of four tokens' value rows as int16 pairs, in natural order:
  // lane k of first[i] holds (token 0, token 1) of dimension d + 8i + k, of second[i] tokens 2, 3.
  static void interleave_pairs(const int8_t* const* v, size_t d, IVec (&first)[kQuadVecs], IVec (&second)[kQuadVecs]) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[0] + d));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[1] + d));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[2] + d));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[3] + d));
    first[0] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    first[1] = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(a, b));
    second[0] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(c, e));
    second[1] = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(c, e));
  }
  // kTailDims dimensions at d, as interleave_pairs.
  static void interleave_pairs_tail(const int8_t* const* v, size_t d, IVec (&first)[1], IVec (&second)[1]) {
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[0] + d));
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[1] + d));
    const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[2] + d));
    const __m128i e = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v[3] + d));
    first[0] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    second[0] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(c, e));
  }
  // Two tokens' weight codes (int16) in every 32-bit lane.
  static IVec broadcast_pair(const uint16_t* w) {
    int32_t pair;
    __builtin_memcpy(&pair, w, sizeof pair);
    return _mm256_set1_epi32(pair);
  }
  // acc + vpmaddwd(a, b). The empty asm keeps the sum a chain: integer adds reassociate, and GCC
  // 12 turned a score block's 64 chained products into a tree, keeping every product on the stack
  // (73 spills per 64 vpmaddwd).
  static IVec madd_add(IVec acc, IVec a, IVec b) {
    IVec sum = _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
    __asm__("" : "+x"(sum));
    return sum;
  }
  static Vec to_float(IVec v) { return _mm256_cvtepi32_ps(v); }
  static constexpr bool kHasReduce16 = false;  // 12 accumulators at most: fold and hadd
  static void reduce16(const IVec (&)[16], float*, size_t) {}
};

}  // namespace
}  // namespace pagedkv::attention_detail
