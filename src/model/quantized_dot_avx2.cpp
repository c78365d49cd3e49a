// The AVX2+FMA+F16C build of QuantizedMatrix's dot products. Entered only after
// best_available_isa() reported AVX2. Integer block sums are exact, as in the scalar twin; only
// the float accumulation of the block (or element) terms runs in 8 lanes instead of one.
#include <immintrin.h>

#include "quantized_dot.h"

namespace pagedkv::quant_detail {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

float dot_f16(const uint16_t* w, const float* x, int n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i))),
                         _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8))),
                         _mm256_loadu_ps(x + i + 8), a1);
  }
  float acc = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) acc += half_to_float(w[i]) * x[i];
  return acc;
}

__m256 bf16x8(const uint16_t* w) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

float dot_bf16(const uint16_t* w, const float* x, int n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(bf16x8(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(bf16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  float acc = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(w[i]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    acc += f * x[i];
  }
  return acc;
}

// Sum of products of 32 signed bytes, as 8 int32 lanes: |w| (unsigned) times x carrying w's sign.
__m256i block_products(__m256i w, __m256i x) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].q));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m256 d = _mm256_set1_ps(half_to_float(w[b].d) * half_to_float(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(block_products(qw, qx)), acc);
  }
  return hsum(acc);
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int blocks) {
  __m256 acc = _mm256_setzero_ps();
  const __m128i low_mask = _mm_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi8(8);
  for (int b = 0; b < blocks; ++b) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].q));
    const __m128i lo = _mm_and_si128(packed, low_mask);                     // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);  // elements 16..31
    const __m256i qw = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), eight);
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m256 d = _mm256_set1_ps(half_to_float(w[b].d) * half_to_float(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(block_products(qw, qx)), acc);
  }
  return hsum(acc);
}

}  // namespace

const DotKernels& avx2_dot_kernels() {
  static const DotKernels k{dot_f16, dot_bf16, dot_q8_0, dot_q4_0};
  return k;
}

}  // namespace pagedkv::quant_detail
