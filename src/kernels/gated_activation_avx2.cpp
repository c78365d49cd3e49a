// silu_gate's AVX2 build: 8 values at a time, exp_as_simd's operations lane for lane.
#include <immintrin.h>

#include "gated_activation_simd.h"
#include "vector_exp.h"

namespace pagedkv::detail {

size_t silu_gate_avx2(const float* gate, const float* up, float* out, size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = kernels_detail::exp256(_mm256_xor_ps(g, sign));
    const __m256 silu = _mm256_mul_ps(g, _mm256_div_ps(one, _mm256_add_ps(one, e)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  return i;
}

}  // namespace pagedkv::detail
