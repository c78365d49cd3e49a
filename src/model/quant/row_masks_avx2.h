// The lane mask of an 8-row half of a panel or tile whose last rows are absent, for the AVX2
// builds' masked loads and stores of partial panels (float_panels_avx2.cpp, kquant_kernels_avx2.cpp,
// quantized_kernels_avx2.cpp). Include it only from translation units compiled for AVX2; it has
// internal linkage.
#pragma once

#include <immintrin.h>

namespace pagedkv::quant_detail {
namespace {

// All bits set in lanes 0..rows-1 (none for rows <= 0, all 8 for rows >= 8).
__m256i rows_mask(int rows) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace
}  // namespace pagedkv::quant_detail
