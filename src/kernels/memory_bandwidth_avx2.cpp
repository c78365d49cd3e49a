// The AVX2 read loop of measure_read_bandwidth(): four independent accumulators of 32-byte loads.
#include <immintrin.h>

#include <cstddef>

#include "memory_bandwidth_simd.h"

namespace pagedkv::detail {

float sum_floats_avx2(const float* data, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(data + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(data + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(data + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(data + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float sum = 0;
  for (float x : lanes) sum += x;
  for (; i < n; ++i) sum += data[i];
  return sum;
}

}  // namespace pagedkv::detail
