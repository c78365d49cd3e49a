// silu_gate's AVX-512 build: 16 values at a time, exp_as_simd's operations lane for lane.
//
// GCC 12 flags the deliberately undefined pass-through operands inside some AVX-512 intrinsics as
// uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "gated_activation_simd.h"
#include "vector_exp.h"

namespace pagedkv::detail {

size_t silu_gate_avx512(const float* gate, const float* up, float* out, size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = kernels_detail::exp512(_mm512_xor_ps(g, sign));
    const __m512 silu = _mm512_mul_ps(g, _mm512_div_ps(one, _mm512_add_ps(one, e)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  return i;
}

}  // namespace pagedkv::detail
