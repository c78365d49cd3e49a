// The kernels' exponential (the attention softmax, the gated activation), one algorithm for its
// three builds: exp256 and exp512 below and the scalar twins' exp_as_simd, which agree bit for bit
// (the int8 attention rounds softmax weights to 8-bit codes; the twins are what tests compare).
//   e^x: x clamped to [kExpLow, kExpHigh] (below kExpLow: exactly 0); n = round(x log2 e);
//   r = x - n ln2 (Cody-Waite, ln2 = kExpLn2High + kExpLn2Low); e^r = 1 + r + r^2 p(r), p the
//   Cephes degree-5 polynomial (kExpPoly, highest power first); times 2^n. About 1 ulp.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pagedkv::kernels_detail {

inline constexpr float kExpLow = -87.33654f, kExpHigh = 88.3762626647949f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpLn2High = 0.693359375f, kExpLn2Low = -2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// The vector exp of one lane in scalar code (the scalar twins' exp), bit for bit.
inline float exp_as_simd(float x) {
  const bool underflow = x < kExpLow;
  x = x > kExpLow ? x : kExpLow;
  x = x < kExpHigh ? x : kExpHigh;
  const float n = std::nearbyint(x * kExpLog2e);
  float r = std::fma(-n, kExpLn2High, x);
  r = std::fma(-n, kExpLn2Low, r);
  float p = kExpPoly[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kExpPoly[i]);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const auto bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return underflow ? 0.0f : y * two_n;
}

#ifdef __AVX2__
// The SIMD builds, for translation units compiled with AVX2 (+FMA) or AVX-512: internal linkage, so
// that no copy built for one ISA can be picked by the linker for another.
namespace {

// e^x for every lane (exp_as_simd's operations); lanes below kExpLow (including -inf) give exactly 0.
inline __m256 exp256(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLow), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(kExpLow));
  x = _mm256_min_ps(x, _mm256_set1_ps(kExpHigh));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Low), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
  // 2^n: n is in [-126, 127], so the biased exponent is a normal one.
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(underflow, result);
}

#ifdef __AVX512F__
// exp256 on 16 lanes: the same operations lane for lane, so the same results.
inline __m512 exp512(__m512 x) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLow), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(kExpLow));
  x = _mm512_min_ps(x, _mm512_set1_ps(kExpHigh));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Low), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), _mm512_mul_ps(y, _mm512_castsi512_ps(bits)));
}
#endif

}  // namespace
#endif

}  // namespace pagedkv::kernels_detail
