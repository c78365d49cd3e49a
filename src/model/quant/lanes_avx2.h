// Lane helpers of the AVX2 builds, whose tiles hold 8 rows in a register's 8 lanes
// (float_panels_avx2.cpp, kquant_kernels_avx2.cpp, quantized_kernels_avx2.cpp): the mask of an
// 8-row half whose last rows are absent, a half's outputs loaded and stored, a token's 4
// activation bytes in every lane, and the activation quantizers' largest lane and packed codes.
// Include it only from translation units compiled for AVX2; it has internal linkage (a file may
// use any of the helpers alone).
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

// The largest of v's 8 lanes (a block's largest magnitude, for the activation quantizers).
[[maybe_unused]] float max_lane(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// 32 int32 codes (4 registers of 8, in order) as 32 bytes in the same order, saturated to int8.
[[maybe_unused]] __m256i codes_as_bytes(const __m256i (&codes)[4]) {
  const __m256i packed =
      _mm256_packs_epi16(_mm256_packs_epi32(codes[0], codes[1]), _mm256_packs_epi32(codes[2], codes[3]));
  // The packs work within 128-bit lanes: 4-byte groups come out as 0, 2, 4, 6, 1, 3, 5, 7.
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace
}  // namespace pagedkv::quant_detail
