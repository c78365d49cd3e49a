// Private: the int8 row quantizers' instruction-set builds (kv_quantize.h has the formats) and
// the one step they share. The builds in kv_quantize.cpp (baseline x86-64: SSE2 and scalar) are
// the reference; every other build must give the same codes and scale (and offset) bits for
// every row (tests/unit/test_storage_quantize_isa.cpp compares them). The key rows' builds take
// n >= 1.
#pragma once

#include <emmintrin.h>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace pagedkv::detail {

// The reference for the key rows (kv_quantize.cpp).
uint32_t quantize_key_row_int8_sse2(const float* x, size_t n, int8_t* codes);

// Only after has_avx2(resolve_isa(...)): the AVX2 builds of the key rows, the values (quantize_row
// for kInt8: the scale) and the keys' rotation (hadamard_rotate of `rows` rows of n elements, one
// after another, in place; n a power of two up to kMaxRotatedHeadDim, below 8 the reference's loop).
uint32_t quantize_key_row_int8_avx2(const float* x, size_t n, int8_t* codes);
float quantize_value_row_int8_avx2(const float* x, size_t n, int8_t* codes);
void hadamard_rotate_rows_avx2(float* x, size_t rows, size_t n);

// Only after resolve_isa(...) == KernelIsa::kAvx512: the same three, and `rows` key rows of n
// elements, one after another in x and in codes (write_kv's heads), the same as
// quantize_key_row_int8_avx512 per row but searching four rows at once; packed[r] gets row r's
// scale and offset.
uint32_t quantize_key_row_int8_avx512(const float* x, size_t n, int8_t* codes);
float quantize_value_row_int8_avx512(const float* x, size_t n, int8_t* codes);
void hadamard_rotate_rows_avx512(float* x, size_t rows, size_t n);
void quantize_key_rows_int8_avx512(const float* x, size_t rows, size_t n, int8_t* codes, uint32_t* packed);

// The row's smallest and largest element and its sum, in SSE2 lanes; false if it holds a NaN or
// an infinity (the poison sum of row_amax). Shared, not rewritten per build: the sum's order
// and which zero (+0 or -0) min and max keep decide the midpoint's bits. Static: each build
// keeps its own copy, compiled for its own ISA, so the linker cannot hand the baseline build an
// AVX-512 one (hence also std::min and std::max spelled out: (b < a) ? b : a and (a < b) ? b : a).
static inline float key_row_min(float a, float b) { return b < a ? b : a; }
static inline float key_row_max(float a, float b) { return a < b ? b : a; }

static inline bool key_row_range(const float* x, size_t n, float& lo, float& hi, float& sum) {
  __m128 lane_lo = _mm_set1_ps(std::numeric_limits<float>::infinity());
  __m128 lane_hi = _mm_set1_ps(-std::numeric_limits<float>::infinity());
  __m128 lane_sum_v = _mm_setzero_ps(), lane_poison = _mm_setzero_ps();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    lane_lo = _mm_min_ps(lane_lo, v);
    lane_hi = _mm_max_ps(lane_hi, v);
    lane_sum_v = _mm_add_ps(lane_sum_v, v);
    lane_poison = _mm_add_ps(lane_poison, _mm_mul_ps(v, _mm_setzero_ps()));
  }
  float los[4], his[4], sums[4], poisons[4];
  _mm_storeu_ps(los, lane_lo);
  _mm_storeu_ps(his, lane_hi);
  _mm_storeu_ps(sums, lane_sum_v);
  _mm_storeu_ps(poisons, lane_poison);
  lo = key_row_min(key_row_min(los[0], los[1]), key_row_min(los[2], los[3]));
  hi = key_row_max(key_row_max(his[0], his[1]), key_row_max(his[2], his[3]));
  sum = (sums[0] + sums[1]) + (sums[2] + sums[3]);
  float poison = (poisons[0] + poisons[1]) + (poisons[2] + poisons[3]);
  for (; i < n; ++i) {
    lo = key_row_min(lo, x[i]);
    hi = key_row_max(hi, x[i]);
    sum += x[i];
    poison += x[i] * 0.0f;
  }
  return poison == 0.0f;
}

}  // namespace pagedkv::detail
