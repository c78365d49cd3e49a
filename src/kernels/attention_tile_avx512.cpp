// The AVX-512 instantiation of the SIMD attention kernel (attention_tile_simd.h): 16-lane
// vectors, so half the FMA, load and conversion instructions of the AVX2 path for the same K/V,
// and 32 registers, so score blocks of 4 rows x 4 tokens and value strips of 4 rows x 4 vectors
// (16 accumulators each) fit without spilling. Requires head_dim % 16 == 0 (the driver falls
// back to AVX2 otherwise).
// GCC 12 flags the deliberately undefined pass-through operand inside _mm512_cvtph_ps and
// _mm512_extractf64x4_pd as uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "attention_tile_simd.h"

namespace pagedkv::attention_detail {
namespace {

struct Avx512 {
  using Vec = __m512;
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
  // As Avx2::load_fp8, 16 lanes: fp8 e4m3 -> f16 bits -> f32, value * 2^-8.
  static Vec load_fp8(const uint8_t* p) {
    const __m256i wide = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i half =
        _mm256_and_si256(_mm256_slli_epi16(wide, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
    return _mm512_cvtph_ps(half);
  }
  static __m256 fold(Vec v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
};

}  // namespace

void attend_rows_avx512(const RowGroupTask& task) { attend_rows<Avx512>(task); }

}  // namespace pagedkv::attention_detail
