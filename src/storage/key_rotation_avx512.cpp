// hadamard_rotate for a token's key rows, AVX-512 (kv_quantize_simd.h): the same butterflies in
// the same order on every element, so the same bits as key_rotation.cpp's loop, row by row. A
// butterfly at distance d < 16 pairs lanes l and l ^ d of one register (a permute, then the sum
// in the low lane and the difference in the high one, as the loop's x[j] = a + b,
// x[j + d] = a - b); from d = 16 on it pairs whole registers. Rows of up to 16 elements share a
// register (8-element heads: two rows per register).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>

#include "kv_quantize_simd.h"

namespace pagedkv::detail {
namespace {

// One butterfly pass at distance d (1, 2, 4 or 8) inside each aligned group of 2d lanes.
__m512 butterfly_in_register(__m512 v, int d) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i d_vec = _mm512_set1_epi32(d);
  const __m512 partner = _mm512_permutexvar_ps(_mm512_xor_si512(lane, d_vec), v);
  const __mmask16 high = _mm512_test_epi32_mask(lane, d_vec);  // lanes j + d: a - b, a the partner
  return _mm512_mask_sub_ps(_mm512_add_ps(v, partner), high, partner, v);
}

}  // namespace

void hadamard_rotate_rows_avx512(float* x, size_t rows, size_t n) {
  const size_t total = rows * n, in_register = n < 16 ? n : 16;
  const __m512 norm = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(n)));  // hadamard_rotate's
  for (size_t i = 0; i < total; i += 16) {
    const __mmask16 m = total - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (total - i)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    for (size_t d = 1; d < in_register; d *= 2) v = butterfly_in_register(v, static_cast<int>(d));
    if (n <= 16) v = _mm512_mul_ps(v, norm);
    _mm512_mask_storeu_ps(x + i, m, v);
  }
  if (n <= 16) return;
  for (size_t r = 0; r < rows; ++r) {
    float* row = x + r * n;
    for (size_t d = 16; d < n; d *= 2)
      for (size_t i = 0; i < n; i += 2 * d)
        for (size_t j = i; j < i + d; j += 16) {
          const __m512 a = _mm512_loadu_ps(row + j), b = _mm512_loadu_ps(row + j + d);
          _mm512_storeu_ps(row + j, _mm512_add_ps(a, b));
          _mm512_storeu_ps(row + j + d, _mm512_sub_ps(a, b));
        }
    for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(row + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), norm));
  }
}

}  // namespace pagedkv::detail
