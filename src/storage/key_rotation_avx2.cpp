// hadamard_rotate for a token's key rows, AVX2 (kv_quantize_simd.h): key_rotation_avx512.cpp's
// butterflies in 8-lane registers, for rows of 8 elements or more (narrower rows take
// key_rotation.cpp's loop, the reference these match bit for bit).
#include <immintrin.h>

#include <cmath>

#include "kv_quantize_simd.h"
#include "pagedkv/storage/key_rotation.h"

namespace pagedkv::detail {
namespace {

// One butterfly pass at distance d (1, 2 or 4) inside each aligned group of 2d lanes: the sum in
// the low lane, the partner minus the lane in the high one (the loop's x[j] = a + b,
// x[j + d] = a - b).
template <int D>
__m256 butterfly_in_register(__m256 v) {
  const __m256 partner =
      _mm256_permutevar8x32_ps(v, _mm256_xor_si256(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(D)));
  constexpr int kHigh = D == 1 ? 0xAA : D == 2 ? 0xCC : 0xF0;
  return _mm256_blend_ps(_mm256_add_ps(v, partner), _mm256_sub_ps(partner, v), kHigh);
}

}  // namespace

void hadamard_rotate_rows_avx2(float* x, size_t rows, size_t n) {
  if (n < 8) {
    for (size_t r = 0; r < rows; ++r) hadamard_rotate(x + r * n, n);
    return;
  }
  const __m256 norm = _mm256_set1_ps(1.0f / std::sqrt(static_cast<float>(n)));  // hadamard_rotate's
  for (size_t r = 0; r < rows; ++r) {
    float* row = x + r * n;
    for (size_t i = 0; i < n; i += 8) {
      __m256 v = _mm256_loadu_ps(row + i);
      v = butterfly_in_register<4>(butterfly_in_register<2>(butterfly_in_register<1>(v)));
      _mm256_storeu_ps(row + i, n == 8 ? _mm256_mul_ps(v, norm) : v);
    }
    if (n == 8) continue;
    for (size_t d = 8; d < n; d *= 2)
      for (size_t i = 0; i < n; i += 2 * d)
        for (size_t j = i; j < i + d; j += 8) {
          const __m256 a = _mm256_loadu_ps(row + j), b = _mm256_loadu_ps(row + j + d);
          _mm256_storeu_ps(row + j, _mm256_add_ps(a, b));
          _mm256_storeu_ps(row + j + d, _mm256_sub_ps(a, b));
        }
    for (size_t i = 0; i < n; i += 8) _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), norm));
  }
}

}  // namespace pagedkv::detail
