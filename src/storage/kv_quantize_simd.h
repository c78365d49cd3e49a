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

#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv::detail {

// The reference for the key rows (kv_quantize.cpp).
uint32_t quantize_key_row_int8_sse2(const float* x, size_t n, int8_t* codes);

// Only after has_avx2(resolve_isa(...)): the AVX2 builds of the key rows, the values (quantize_row
// for kInt8: the scale) and the keys' rotation (hadamard_rotate of `rows` rows of n elements, one
// after another, in place; n a power of two up to kMaxRotatedHeadDim, below 8 the reference's loop).
uint32_t quantize_key_row_int8_avx2(const float* x, size_t n, int8_t* codes);
float quantize_value_row_int8_avx2(const float* x, size_t n, int8_t* codes);
void hadamard_rotate_rows_avx2(float* x, size_t rows, size_t n);

// `rows` key rows of n elements, one after another in x and in codes (write_kv's heads), the
// same as quantize_key_row_int8_avx2 per row but searching four rows at once; packed[r] gets
// row r's scale and offset.
void quantize_key_rows_int8_avx2(const float* x, size_t rows, size_t n, int8_t* codes, uint32_t* packed);

// Only after resolve_isa(...) == KernelIsa::kAvx512: the same four.
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

// One row's range and midpoint, as the reference computes them before its search, and which
// answer the reference gives it: NaN (a NaN, an infinity or an element beyond +-kKeyF16Max),
// the midpoint with scale 0 (constant), or a searched or fitted pair (plain). f16_value rounds
// an f32 to the nearest f16 value (each build's own F16C call, as a lambda: static and its own
// type, so no build's instance can stand in for another's).
struct KeyRowRange {
  float lo, hi, sum, mid, half;
  enum Kind { kNaN, kConstant, kPlain } kind;
};

// The midpoint, half range and kind of a row whose lo and hi are finite and within
// +-kKeyF16Max (the part every build's range computation ends with).
template <class F16Value>
static inline void key_row_set_midpoint(KeyRowRange& r, F16Value f16_value) {
  r.mid = f16_value(0.5f * r.hi + 0.5f * r.lo);
  r.half = key_row_max(r.hi - r.mid, r.mid - r.lo);
  r.kind = r.half > 0 ? KeyRowRange::kPlain : KeyRowRange::kConstant;
}

template <class F16Value>
static inline KeyRowRange key_row_midpoint(const float* x, size_t n, F16Value f16_value) {
  KeyRowRange r{};
  const bool finite = key_row_range(x, n, r.lo, r.hi, r.sum);
  if (!finite || !(key_row_max(r.hi, -r.lo) <= kKeyF16Max)) return r;  // kNaN
  key_row_set_midpoint(r, f16_value);
  return r;
}

// The search's candidates' top codes, 127 - step * min(l, candidates - 1) with step = 15 /
// (candidates - 1), for every count it takes: the reference's float expressions, folded by the
// compiler with the same rounding (a table: no division on the way to the first step).
struct KeyTopCodeTable {
  alignas(64) float codes[kInt8FitMaxCandidates + 1][16];
};
constexpr KeyTopCodeTable make_key_top_codes() {
  KeyTopCodeTable t{};
  for (size_t c = 2; c <= kInt8FitMaxCandidates; ++c) {
    const float top_step = (kInt8CodeMax - kInt8FitLowestTopCode) / static_cast<float>(c - 1);
    for (size_t l = 0; l < 16; ++l) t.codes[c][l] = kInt8CodeMax - top_step * static_cast<float>(l < c - 1 ? l : c - 1);
  }
  return t;
}
inline constexpr KeyTopCodeTable kKeyTopCodes = make_key_top_codes();

// write_kv's key rows (`rows` of n elements, one after another in x and in codes), kRows at a
// time where the search runs and all kRows are plain, with a build's own functions:
// midpoint(row, n) gives a row's range, search_rows(row, range, n, candidates, codes, packed)
// searches and stores kRows rows together, one_row(row, n, codes) does any single row (the rest,
// and groups holding a NaN or constant row).
template <int kRows>
static inline void quantize_key_rows_grouped(const float* x, size_t rows, size_t n, int8_t* codes, uint32_t* packed,
                                             KeyRowRange (*midpoint)(const float*, size_t),
                                             void (*search_rows)(const float* const*, const KeyRowRange*, size_t,
                                                                 size_t, int8_t* const*, uint32_t*),
                                             uint32_t (*one_row)(const float*, size_t, int8_t*)) {
  const size_t candidates = int8_key_fit_candidates(n);
  size_t r = 0;
  if (candidates > 1) {
    for (; r + kRows <= rows; r += kRows) {
      const float* row[kRows];
      int8_t* row_codes[kRows];
      KeyRowRange range[kRows];
      bool plain = true;
      for (int k = 0; k < kRows; ++k) {
        row[k] = x + (r + static_cast<size_t>(k)) * n;
        row_codes[k] = codes + (r + static_cast<size_t>(k)) * n;
        range[k] = midpoint(row[k], n);
        plain = plain && range[k].kind == KeyRowRange::kPlain;
      }
      if (plain) {
        search_rows(row, range, n, candidates, row_codes, packed + r);
        continue;
      }
      for (int k = 0; k < kRows; ++k) packed[r + static_cast<size_t>(k)] = one_row(row[k], n, row_codes[k]);
    }
  }
  for (; r < rows; ++r) packed[r] = one_row(x + r * n, n, codes + r * n);
}

}  // namespace pagedkv::detail
