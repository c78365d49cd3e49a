// The int8 rows' AVX2 builds (kv_quantize_simd.h); kv_quantize.cpp has the references. Values:
// amax / 127 in 8 lanes. Keys: the reference's search with the 16 candidates in two 8-lane
// registers instead of four groups of four, several rows at once (write_kv's heads) with the
// steps around the pass over the elements in phases across them, the best pair picked without
// branches, F16C for the f16 steps and the codes 8 at a time. The same operations in the same
// order on every lane, so the same bits, compiled with -ffp-contract=off (CMakeLists.txt).
// The few operations that differ from the reference's are those of the AVX-512 build
// (kv_quantize_avx512.cpp says why each gives the same result): vroundps for the add-and-
// subtract rounding, no clamp in the search, a multiply by 1 / n for n a power of two, and
// F16C for the Veltkamp split.
#include <immintrin.h>

#include <cstring>

#include "kv_quantize_simd.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv::detail {
namespace {

constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

float f16_value(float v) { return _cvtsh_ss(_cvtss_sh(v, kNearest)); }
uint32_t f16_bits(float v) { return static_cast<uint32_t>(_cvtss_sh(v, kNearest)); }
uint32_t pack(float scale, float offset) { return f16_bits(scale) | (f16_bits(offset) << 16); }

// The smallest f16 scale >= at_least (> 0): rounded to nearest, one code up if that fell short.
float f16_scale_at_least(float at_least) {
  uint32_t h = f16_bits(at_least);
  if (_cvtsh_ss(static_cast<unsigned short>(h)) < at_least) ++h;
  return _cvtsh_ss(static_cast<unsigned short>(h));
}

// The reference's f16_round (plus 0: its zeros are +0) and f16_at_least (need > 0): one f16
// code up where the rounding fell short, the 32-bit compare masks narrowed to 16 bits (-1 or 0)
// and subtracted from the codes.
__m256 f16_round(__m256 v) { return _mm256_add_ps(_mm256_cvtph_ps(_mm256_cvtps_ph(v, kNearest)), _mm256_setzero_ps()); }

__m256 f16_at_least(__m256 need) {
  const __m128i h = _mm256_cvtps_ph(need, kNearest);
  const __m256i short_of = _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtph_ps(h), need, _CMP_LT_OS));
  const __m128i short16 = _mm_packs_epi32(_mm256_castsi256_si128(short_of), _mm256_extracti128_si256(short_of, 1));
  return _mm256_cvtph_ps(_mm_sub_epi16(h, short16));
}

// The reference's final loop: codes = clamp(round_to_even((x - offset) * inverse)), 8 at a time,
// the tail one by one with the same operations.
void store_int8_codes(const float* x, size_t n, float offset, float inverse, int8_t* codes) {
  const __m256 off = _mm256_set1_ps(offset), inv = _mm256_set1_ps(inverse);
  const __m256 magic = _mm256_set1_ps(12582912.0f), top = _mm256_set1_ps(kInt8CodeMax),
               bottom = _mm256_set1_ps(-kInt8CodeMax);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 scaled = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), off), inv);
    const __m256 code = _mm256_max_ps(bottom, _mm256_min_ps(top, _mm256_sub_ps(_mm256_add_ps(scaled, magic), magic)));
    const __m256i c32 = _mm256_cvtps_epi32(code);
    const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c32), _mm256_extracti128_si256(c32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm_packs_epi16(c16, c16));
  }
  for (; i < n; ++i) {
    const float q = ((x[i] - offset) * inverse + 12582912.0f) - 12582912.0f;
    codes[i] = static_cast<int8_t>(q < -kInt8CodeMax ? -kInt8CodeMax : (kInt8CodeMax < q ? kInt8CodeMax : q));
  }
}

KeyRowRange key_row_midpoint(const float* x, size_t n) {
  return detail::key_row_midpoint(x, n, [](float v) { return f16_value(v); });
}

// The reference's search_key_steps for `candidates` (4..16) steps, lane l of group g the
// candidate min(8 g + l, candidates - 1), for R plain rows of n elements at once (x[r],
// range[r]); then each row's codes and packed pair. A row where no pair's error is below
// infinity keeps the midpoint and the smallest f16 step >= half / 127, as the reference does.
// One row after another, the search mostly waits on its own chains (divisions, f16 rounding,
// the refined pair's closed form); so the steps before and after the pass over the elements run
// in phases, each for all R rows before the next, and their chains overlap. The pass itself goes
// row by row: its eight sums per row fill the 16 registers.
template <int R>
void search_and_store(const float* const* x, const KeyRowRange* range, size_t n, size_t candidates,
                      int8_t* const* codes, uint32_t* packed) {
  const __m256 top_codes[2] = {_mm256_load_ps(kKeyTopCodes.codes[candidates]),
                               _mm256_load_ps(kKeyTopCodes.codes[candidates] + 8)};
  __m256 mid[R], scale[R][2], inverse[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    mid[r] = _mm256_set1_ps(range[r].mid);
    for (int g = 0; g < 2; ++g) scale[r][g] = f16_at_least(_mm256_div_ps(_mm256_set1_ps(range[r].half), top_codes[g]));
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 2; ++g) inverse[r][g] = _mm256_div_ps(_mm256_set1_ps(1.0f), scale[r][g]);
  // y = x - mid once per element (n <= 32 here), Σ y² in the reference's order, the rows side by side.
  alignas(32) float centred[R][32];
  static_assert(kInt8FitElementBudget / 4 <= 32, "searched rows (4 candidates or more) fit the buffers");
  float y_squares_sum[R] = {};
  for (size_t i = 0; i < n; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      centred[r][i] = x[r][i] - range[r].mid;
      y_squares_sum[r] += centred[r][i] * centred[r][i];
    }
  // The pass: vroundps, and no clamp (|y / step| < 127.5 here; kv_quantize_avx512.cpp says why).
  __m256 squared_error[R][2], yc[R][2], cc[R][2], cs[R][2];
  for (int r = 0; r < R; ++r) {
    __m256 se0 = _mm256_setzero_ps(), se1 = se0, yc0 = se0, yc1 = se0, cc0 = se0, cc1 = se0, cs0 = se0, cs1 = se0;
    const __m256 scale0 = scale[r][0], scale1 = scale[r][1], inverse0 = inverse[r][0], inverse1 = inverse[r][1];
    for (size_t i = 0; i < n; ++i) {
      const __m256 y = _mm256_set1_ps(centred[r][i]);
      const __m256 code0 = _mm256_round_ps(_mm256_mul_ps(y, inverse0), kNearest);
      const __m256 code1 = _mm256_round_ps(_mm256_mul_ps(y, inverse1), kNearest);
      const __m256 diff0 = _mm256_sub_ps(y, _mm256_mul_ps(scale0, code0));
      const __m256 diff1 = _mm256_sub_ps(y, _mm256_mul_ps(scale1, code1));
      se0 = _mm256_add_ps(se0, _mm256_mul_ps(diff0, diff0));
      se1 = _mm256_add_ps(se1, _mm256_mul_ps(diff1, diff1));
      yc0 = _mm256_add_ps(yc0, _mm256_mul_ps(y, code0));
      yc1 = _mm256_add_ps(yc1, _mm256_mul_ps(y, code1));
      cc0 = _mm256_add_ps(cc0, _mm256_mul_ps(code0, code0));
      cc1 = _mm256_add_ps(cc1, _mm256_mul_ps(code1, code1));
      cs0 = _mm256_add_ps(cs0, code0);
      cs1 = _mm256_add_ps(cs1, code1);
    }
    squared_error[r][0] = se0, squared_error[r][1] = se1, yc[r][0] = yc0, yc[r][1] = yc1;
    cc[r][0] = cc0, cc[r][1] = cc1, cs[r][0] = cs0, cs[r][1] = cs1;
  }
  // The refined pairs, in closed form from the pass's sums, as the reference's search_key_steps
  // (dividing by n is multiplying by 1 / n where n is a power of two: the same quotient).
  const __m256 count = _mm256_set1_ps(static_cast<float>(n)), two = _mm256_set1_ps(2.0f), zero = _mm256_setzero_ps();
  const __m256 inverse_count = _mm256_set1_ps(1.0f / static_cast<float>(n)), inf = _mm256_set1_ps(__builtin_inff());
  const bool power_of_two = (n & (n - 1)) == 0;
  __m256 offset[R][2], refined[R][2], own[R][2], fit[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256 y_sum = _mm256_set1_ps(range[r].sum - static_cast<float>(n) * range[r].mid);
    const __m256 y_squares = _mm256_set1_ps(y_squares_sum[r]);
    for (int g = 0; g < 2; ++g) {
      const __m256 det = _mm256_sub_ps(_mm256_mul_ps(count, cc[r][g]), _mm256_mul_ps(cs[r][g], cs[r][g]));
      const __m256 fitted_scale =
          _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(count, yc[r][g]), _mm256_mul_ps(cs[r][g], y_sum)), det);
      const __m256 valid =
          _mm256_and_ps(_mm256_cmp_ps(det, zero, _CMP_GT_OS), _mm256_cmp_ps(fitted_scale, zero, _CMP_GT_OS));
      const __m256 spare = _mm256_sub_ps(y_sum, _mm256_mul_ps(fitted_scale, cs[r][g]));
      const __m256 shift_fit = power_of_two ? _mm256_mul_ps(spare, inverse_count) : _mm256_div_ps(spare, count);
      offset[r][g] = _mm256_blendv_ps(mid[r], f16_round(_mm256_add_ps(mid[r], shift_fit)), valid);
      const __m256 reach = _mm256_max_ps(_mm256_sub_ps(_mm256_set1_ps(range[r].hi), offset[r][g]),
                                         _mm256_sub_ps(offset[r][g], _mm256_set1_ps(range[r].lo)));
      refined[r][g] = f16_at_least(
          _mm256_max_ps(_mm256_and_ps(valid, fitted_scale), _mm256_div_ps(reach, _mm256_set1_ps(kInt8CodeMax + 0.5f))));
      const __m256 shift = _mm256_sub_ps(offset[r][g], mid[r]), step = refined[r][g];
      __m256 e = _mm256_sub_ps(
          y_squares, _mm256_mul_ps(two, _mm256_add_ps(_mm256_mul_ps(shift, y_sum), _mm256_mul_ps(step, yc[r][g]))));
      e = _mm256_add_ps(e, _mm256_mul_ps(shift, _mm256_add_ps(_mm256_mul_ps(count, shift),
                                                              _mm256_mul_ps(two, _mm256_mul_ps(step, cs[r][g])))));
      e = _mm256_add_ps(e, _mm256_mul_ps(_mm256_mul_ps(step, step), cc[r][g]));
      // NaN never wins below: as infinity, which never does either.
      const __m256 own_error = squared_error[r][g];
      own[r][g] = _mm256_blendv_ps(inf, own_error, _mm256_cmp_ps(own_error, own_error, _CMP_ORD_Q));
      fit[r][g] = _mm256_blendv_ps(inf, e, _mm256_cmp_ps(e, e, _CMP_ORD_Q));
    }
  }
  // The reference keeps the first of the smallest errors in its order (candidate 0's own, its
  // refined one, candidate 1's own, ...), NaN and infinity never: the smallest finite error in
  // every lane, then the first lane holding it, its own pair before its refined one, picked with
  // the compare masks (no branch on which: it is as good as random).
  __m256 least[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    least[r] = _mm256_min_ps(_mm256_min_ps(own[r][0], fit[r][0]), _mm256_min_ps(own[r][1], fit[r][1]));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) least[r] = _mm256_min_ps(least[r], _mm256_permute2f128_ps(least[r], least[r], 1));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) least[r] = _mm256_min_ps(least[r], _mm256_permute_ps(least[r], 0x4E));
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) least[r] = _mm256_min_ps(least[r], _mm256_permute_ps(least[r], 0xB1));
  for (int r = 0; r < R; ++r) {
    float chosen_scale, chosen_offset;
    if (_mm256_cvtss_f32(least[r]) < __builtin_inff()) {
      alignas(32) float pick_scale[16], pick_offset[16];
      unsigned hits = 0;
      for (int g = 0; g < 2; ++g) {
        const __m256 own_hit = _mm256_cmp_ps(own[r][g], least[r], _CMP_EQ_OQ);
        const __m256 fit_hit = _mm256_cmp_ps(fit[r][g], least[r], _CMP_EQ_OQ);
        hits |= static_cast<unsigned>(_mm256_movemask_ps(_mm256_or_ps(own_hit, fit_hit))) << (8 * g);
        _mm256_store_ps(pick_scale + 8 * g, _mm256_blendv_ps(refined[r][g], scale[r][g], own_hit));
        _mm256_store_ps(pick_offset + 8 * g, _mm256_blendv_ps(offset[r][g], mid[r], own_hit));
      }
      const int l = __builtin_ctz(hits);
      chosen_scale = pick_scale[l], chosen_offset = pick_offset[l];
    } else {
      chosen_scale = f16_scale_at_least(range[r].half / kInt8CodeMax);
      chosen_offset = range[r].mid;
    }
    // 1 / scale: a candidate's own inverse in the pass was that division too.
    store_int8_codes(x[r], n, chosen_offset, 1.0f / chosen_scale, codes[r]);
    packed[r] = pack(chosen_scale, chosen_offset);
  }
}

// One row, any n >= 1: the reference's early answers for NaN, out-of-range and constant rows,
// the midpoint and the smallest f16 step >= half / 127 where the search takes one candidate,
// else search_and_store<1>.
uint32_t quantize_one_key_row(const float* x, size_t n, int8_t* codes) {
  const KeyRowRange range = key_row_midpoint(x, n);
  if (range.kind != KeyRowRange::kPlain) {
    std::memset(codes, 0, n);
    return range.kind == KeyRowRange::kConstant ? pack(0.0f, range.mid) : kNaNKeyScaleOffset;
  }
  const size_t candidates = int8_key_fit_candidates(n);
  uint32_t packed;
  if (candidates > 1) {
    search_and_store<1>(&x, &range, n, candidates, &codes, &packed);
    return packed;
  }
  const float step = f16_scale_at_least(range.half / kInt8CodeMax);
  store_int8_codes(x, n, range.mid, 1.0f / step, codes);
  return pack(step, range.mid);
}

}  // namespace

// quantize_row for kInt8: amax / 127, 8 lanes (max and the poison sum: any order, same result).
float quantize_value_row_int8_avx2(const float* x, size_t n, int8_t* codes) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 lane_max = _mm256_setzero_ps(), lane_poison = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    lane_max = _mm256_max_ps(lane_max, _mm256_and_ps(v, abs_mask));
    lane_poison = _mm256_add_ps(lane_poison, _mm256_mul_ps(v, _mm256_setzero_ps()));
  }
  // Across the lanes by halves (a NaN lane makes the poison NaN, whatever max keeps).
  __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(lane_max), _mm256_extractf128_ps(lane_max, 1));
  __m128 poison4 = _mm_add_ps(_mm256_castps256_ps128(lane_poison), _mm256_extractf128_ps(lane_poison, 1));
  max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
  poison4 = _mm_add_ps(poison4, _mm_movehl_ps(poison4, poison4));
  float amax = _mm_cvtss_f32(_mm_max_ss(max4, _mm_movehdup_ps(max4)));
  float poison = _mm_cvtss_f32(_mm_add_ss(poison4, _mm_movehdup_ps(poison4)));
  for (; i < n; ++i) {
    const float a = __builtin_fabsf(x[i]);
    amax = a > amax ? a : amax;
    poison += x[i] * 0.0f;
  }
  if (!(poison == 0.0f) || !(amax > 0)) {  // a NaN or an infinity (the reference's amax: NaN), or zeros
    std::memset(codes, 0, n);
    return poison == 0.0f ? 0.0f : __builtin_nanf("");
  }
  store_int8_codes(x, n, 0.0f, kInt8CodeMax / amax, codes);
  return amax / kInt8CodeMax;
}

uint32_t quantize_key_row_int8_avx2(const float* x, size_t n, int8_t* codes) {
  return quantize_one_key_row(x, n, codes);
}

void quantize_key_rows_int8_avx2(const float* x, size_t rows, size_t n, int8_t* codes, uint32_t* packed) {
  constexpr int kRows = 4;  // rows searched together
  quantize_key_rows_grouped<kRows>(x, rows, n, codes, packed, key_row_midpoint, search_and_store<kRows>,
                                   quantize_one_key_row);
}

}  // namespace pagedkv::detail
