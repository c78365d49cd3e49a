// The AVX-512 vector ISA of the SIMD attention kernel (attention_tile_simd.h): 16-lane vectors,
// so half the FMA, load and conversion instructions of the AVX2 path for the same K/V, and 32
// registers, so score blocks of 4 rows x 4 tokens and value strips of 4 rows x 4 vectors (16
// accumulators each) fit without spilling. Requires head_dim % 16 == 0 (the driver falls back to
// AVX2 otherwise). kVnni: the int8 path's dot products with AVX512-VNNI's vpdpwssd and vpdpbusd
// (attention_tile_vnni_avx512.cpp, built with -mavx512vnni) instead of vpmaddwd + vpaddd.
// Included only by translation units built with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pagedkv::attention_detail {
namespace {

template <bool kVnni>
struct Avx512Isa {
  using Vec = __m512;
  using IVec = __m512i;
  static constexpr int kLanes = 16;
  static constexpr int kScoreTokens = 4;
  // Per iteration: 2-4 lines at a time keep the line-fill buffers busy without stalling the
  // arithmetic (measured: fp32 decode from DRAM 20.5 -> 22 GB/s on two threads).
  static constexpr bool kPrefetchInLoops = true;
  static constexpr int kValueChunks = 4;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Vec load_bf16(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static Vec load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // As Avx2Isa::load_fp8, 16 lanes: fp8 e4m3 -> f16 bits -> f32, value * 2^-8.
  static Vec load_fp8(const uint8_t* p) {
    const __m256i wide = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i half = _mm256_and_si256(_mm256_slli_epi16(wide, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
    return _mm512_cvtph_ps(half);
  }
  static __m256 fold(Vec v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }

  // The int8 path (attention_tile_int8.h). A key chunk is kPairDims int16 (32 codes). A value
  // group is kQuadDims dimensions of four tokens, their codes interleaved per dimension as the four
  // bytes of a 32-bit lane (vpdpbusd's layout), in kQuadVecs vectors of 16 dimensions: unpacking
  // bytes works within 128-bit lanes, so vector k holds dimensions 16L + 4k .. 16L + 4k + 3 of
  // each 128-bit lane L (kQuadsPermuted: the kernel puts them back once per task). The tail of a
  // head that is not a whole number of groups goes kTailDims at a time, in natural order.
  static constexpr int kPairDims = 32;
  static constexpr int kIntScoreTokens = 4;  // 16 accumulators of 32 registers, VNNI or not
  static constexpr int kQuadDims = 64;
  static constexpr int kQuadVecs = 4;  // 4 rows x 4 accumulators
  static constexpr int kTailDims = 16;
  static constexpr bool kQuadsPermuted = true;
  static constexpr bool kPairedValues = false;  // 32 registers hold the vpdpbusd emulation
  static IVec izero() { return _mm512_setzero_si512(); }
  static IVec load_k16(const int8_t* p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static IVec load_k16_half(const int8_t* p) {
    return _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static IVec load_q16(const int16_t* p) { return _mm512_loadu_si512(p); }
  static IVec dpwssd(IVec acc, IVec a, IVec b) {
    if constexpr (kVnni) {
#ifdef __AVX512VNNI__
      // Not _mm512_dpwssd_epi32: with it GCC 12 copies each loop-carried accumulator to another
      // register and back every iteration (two moves per vpdpwssd in the value loop); the asm
      // ties the accumulator to its register.
      __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
      return acc;
#endif
    }
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
  }
  static __m256i fold_i(IVec v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
  // acc + the products of the unsigned bytes of a and the signed bytes of b, four per 32-bit lane.
  // Without VNNI: the even and the odd bytes widened to int16 (zero- and sign-extended), two
  // vpmaddwd (each product fits: 255 x 128), the same int32 sums.
  static IVec dpbusd(IVec acc, IVec a, IVec b) {
    if constexpr (kVnni) {
#ifdef __AVX512VNNI__
      __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));  // asm: as dpwssd
      return acc;
#endif
    }
    const IVec a_even = _mm512_and_si512(a, _mm512_set1_epi16(0x00FF)), a_odd = _mm512_srli_epi16(a, 8);
    const IVec b_even = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8), b_odd = _mm512_srai_epi16(b, 8);
    return _mm512_add_epi32(acc, _mm512_add_epi32(_mm512_madd_epi16(a_even, b_even), _mm512_madd_epi16(a_odd, b_odd)));
  }
  // The codes of dimensions [d, d + kQuadDims) of four tokens' value rows, interleaved (above).
  static void interleave_quad(const int8_t* const* v, size_t d, IVec (&out)[kQuadVecs]) {
    const IVec a = _mm512_loadu_si512(v[0] + d), b = _mm512_loadu_si512(v[1] + d);
    const IVec c = _mm512_loadu_si512(v[2] + d), e = _mm512_loadu_si512(v[3] + d);
    const IVec ab_lo = _mm512_unpacklo_epi8(a, b), ab_hi = _mm512_unpackhi_epi8(a, b);
    const IVec ce_lo = _mm512_unpacklo_epi8(c, e), ce_hi = _mm512_unpackhi_epi8(c, e);
    out[0] = _mm512_unpacklo_epi16(ab_lo, ce_lo);
    out[1] = _mm512_unpackhi_epi16(ab_lo, ce_lo);
    out[2] = _mm512_unpacklo_epi16(ab_hi, ce_hi);
    out[3] = _mm512_unpackhi_epi16(ab_hi, ce_hi);
  }
  // kTailDims dimensions at d, in natural order.
  static IVec interleave_quad_tail(const int8_t* const* v, size_t d) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[0] + d));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[1] + d));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[2] + d));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v[3] + d));
    const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
    const __m128i ce_lo = _mm_unpacklo_epi8(c, e), ce_hi = _mm_unpackhi_epi8(c, e);
    const __m256i lo = _mm256_set_m128i(_mm_unpackhi_epi16(ab_lo, ce_lo), _mm_unpacklo_epi16(ab_lo, ce_lo));
    const __m256i hi = _mm256_set_m128i(_mm_unpackhi_epi16(ab_hi, ce_hi), _mm_unpacklo_epi16(ab_hi, ce_hi));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  // Four tokens' weight codes (bytes) in every 32-bit lane.
  static IVec broadcast_quad(const uint8_t* w) {
    int32_t quad;
    __builtin_memcpy(&quad, w, sizeof quad);
    return _mm512_set1_epi32(quad);
  }
  static Vec to_float(IVec v) { return _mm512_cvtepi32_ps(v); }
  // The horizontal sums of a[4r + t] (4 rows x 4 tokens), as floats, to out[r * stride + t]: a
  // tree of 128-bit-lane shuffles and adds (45 instructions), cheaper than folding each vector and
  // reducing with hadd (about 74 uops), and one 128-bit store per row.
  static constexpr bool kHasReduce16 = true;
  static void reduce16(const IVec (&a)[16], float* out, size_t stride) {
    IVec m[8];
    for (int i = 0; i < 8; ++i)  // lanes 0-1: a[2i]'s 8 partial sums, lanes 2-3: a[2i+1]'s
      m[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_i32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    IVec n[4];
    for (int i = 0; i < 4; ++i)  // lane L: 4 partial sums of a[4i + L]
      n[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(m[2 * i], m[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_i32x4(m[2 * i], m[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    const IVec p = _mm512_add_epi32(_mm512_unpacklo_epi32(n[0], n[1]), _mm512_unpackhi_epi32(n[0], n[1]));
    const IVec q = _mm512_add_epi32(_mm512_unpacklo_epi32(n[2], n[3]), _mm512_unpackhi_epi32(n[2], n[3]));
    // Element 4L + e is the sum of a[4e + L]; the permutation puts a[i] at element i.
    const IVec r = _mm512_add_epi32(_mm512_unpacklo_epi64(p, q), _mm512_unpackhi_epi64(p, q));
    const IVec order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512 sums = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(order, r));
    _mm_storeu_ps(out, _mm512_castps512_ps128(sums));
    _mm_storeu_ps(out + stride, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(out + 2 * stride, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(out + 3 * stride, _mm512_extractf32x4_ps(sums, 3));
  }
};

}  // namespace
}  // namespace pagedkv::attention_detail
