// make_query_row_codes on AVX2 (dim % 8 == 0): the rotation's AVX2 build (storage/key_rotation.h)
// and the sum, amax and codes in the same pass structure as the scalar twin (query_codes.cpp), so
// that every result has the same bits.
#include <immintrin.h>

#include <limits>

#include "pagedkv/storage/key_rotation.h"
#include "pagedkv/storage/thread_scratch.h"
#include "query_codes_simd.h"

namespace pagedkv::detail {

QueryRowCodes make_query_row_codes_avx2(const float* query, size_t dim, float softmax_scale, bool rotate_row,
                                        int16_t* codes) {
  // Not a container of this file's own (thread_scratch.h says why).
  float* x = thread_scratch_floats(ScratchBuffer::kQueryRow, dim);
  const __m256 scale = _mm256_set1_ps(softmax_scale);
  for (size_t i = 0; i < dim; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(query + i), scale));
  if (rotate_row) hadamard_rotate_rows(x, 1, dim, KernelIsa::kAvx2);  // hadamard_rotate's bits

  const __m256 magnitude_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 sum = _mm256_setzero_ps(), amax = _mm256_setzero_ps();
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (size_t i = 0; i < dim; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 magnitude = _mm256_and_ps(v, magnitude_mask);
    sum = _mm256_add_ps(sum, v);
    amax = _mm256_max_ps(amax, magnitude);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(magnitude, infinity, _CMP_LT_OQ));  // false for NaN and inf
  }
  QueryRowCodes result;
  const __m128 quads = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));  // l + l+4
  const __m128 pairs = _mm_add_ps(quads, _mm_movehl_ps(quads, quads));  // (0+4)+(2+6), (1+5)+(3+7)
  result.sum = _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  const float row_max = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));

  const size_t padded = padded_query_dim(dim);
  for (size_t d = dim; d < padded; ++d) codes[d] = 0;
  const bool all_finite = _mm256_movemask_ps(finite) == 0xFF;
  if (!all_finite || !(row_max > 0)) {
    for (size_t d = 0; d < dim; ++d) codes[d] = 0;
    result.scale = all_finite ? row_max : std::numeric_limits<float>::quiet_NaN();
    return result;
  }
  const auto code_max = static_cast<float>(query_code_max(dim));
  const __m256 inverse = _mm256_set1_ps(code_max / row_max);
  const __m256 top = _mm256_set1_ps(code_max), bottom = _mm256_set1_ps(-code_max);
  for (size_t i = 0; i < dim; i += 8) {
    const __m256 rounded =
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i c = _mm256_cvtps_epi32(_mm256_min_ps(top, _mm256_max_ps(bottom, rounded)));
    const __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), packed);
  }
  result.scale = row_max / code_max;
  return result;
}

}  // namespace pagedkv::detail
