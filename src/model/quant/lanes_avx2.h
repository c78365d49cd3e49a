// Lane helpers of the AVX2 builds, whose tiles hold 8 rows in a register's 8 lanes
// (float_panels_avx2.cpp, kquant_kernels_avx2.cpp, quantized_kernels_avx2.cpp): the mask of an
// 8-row half whose last rows are absent, a half's outputs loaded and stored, and a token's 4
// activation bytes in every lane. Include it only from translation units compiled for AVX2; it
// has internal linkage (a file may use any of the helpers alone).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace pagedkv::quant_detail {
namespace {

// All bits set in lanes 0..rows-1 (none for rows <= 0, all 8 for rows >= 8), for the masked loads
// and stores of partial panels.
[[maybe_unused]] __m256i rows_mask(int rows) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// A half's 8 outputs at y, of which the first `rows` exist (all for rows >= 8, none for rows <= 0).
// Masked only where a panel ends within the half: AMD's vmaskmovps store is microcoded (on Zen 3
// about three plain stores' time), and a tile stores every half of its tokens.
[[maybe_unused]] void store_rows(float* y, int rows, __m256 v) {
  if (rows >= 8) _mm256_storeu_ps(y, v);
  else if (rows > 0) _mm256_maskstore_ps(y, rows_mask(rows), v);
}
[[maybe_unused]] __m256 load_rows(const float* y, int rows) {
  return rows >= 8 ? _mm256_loadu_ps(y) : _mm256_maskload_ps(y, rows_mask(rows));
}

// The 4 activation bytes at q in every lane: with lanes = rows, one vpmaddubsw meets 8 rows' 4
// columns.
[[maybe_unused]] __m256i broadcast_4_bytes(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, sizeof v);
  return _mm256_set1_epi32(v);
}

}  // namespace
}  // namespace pagedkv::quant_detail
