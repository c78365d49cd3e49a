// The AVX2+FMA+F16C instantiation of the SIMD attention kernel (attention_tile_simd.h): 8-lane
// vectors, score blocks of 4 rows x 3 tokens and value strips of 4 rows x 3 vectors, 12
// accumulators each (of 16 YMM registers; 4 x 4 spills).
#include <immintrin.h>

#include "attention_tile_simd.h"

namespace pagedkv::attention_detail {
namespace {

struct Avx2 {
  using Vec = __m256;
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
};

}  // namespace

void attend_rows_avx2(const RowGroupTask& task) { attend_rows<Avx2>(task); }

}  // namespace pagedkv::attention_detail
