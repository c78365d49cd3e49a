// The int8 rows' AVX2 builds (kv_quantize_simd.h); kv_quantize.cpp has the references. Values:
// amax / 127 in 8 lanes. Keys: the reference's search with the 16 candidates in two 8-lane
// registers instead of four groups of four, the best pair picked without a branch per
// candidate, F16C for the f16 steps and the codes 8 at a time; one row at a time (16 registers
// leave no room for several). The same operations in the
// same order on every lane, so the same bits, compiled with -ffp-contract=off (CMakeLists.txt).
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
  const __m256 magic = _mm256_set1_ps(12582912.0f), top = _mm256_set1_ps(kInt8CodeMax), bottom = _mm256_set1_ps(-kInt8CodeMax);
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

struct Chosen {
  float scale, offset, inverse;
};

// The reference's search_key_steps over `candidates` (4..16) steps, lane l of group g the
// candidate min(8 g + l, candidates - 1); false where no pair's error is below infinity.
bool search(const float* x, size_t n, size_t candidates, float lo, float hi, float mid_offset, float half, float x_sum,
            Chosen& chosen) {
  // The candidates' top codes: 127 - step * min(l, candidates - 1), step = 15 / (candidates - 1).
  const float top_step = (kInt8CodeMax - kInt8FitLowestTopCode) / static_cast<float>(candidates - 1);
  alignas(32) float top_codes[16];
  for (size_t l = 0; l < 16; ++l)
    top_codes[l] = kInt8CodeMax - top_step * static_cast<float>(l < candidates - 1 ? l : candidates - 1);
  const __m256 mid = _mm256_set1_ps(mid_offset);
  __m256 scale[2], inverse[2], squared_error[2], yc[2], cc[2], cs[2];
  for (int g = 0; g < 2; ++g) {
    scale[g] = f16_at_least(_mm256_div_ps(_mm256_set1_ps(half), _mm256_load_ps(top_codes + 8 * g)));
    inverse[g] = _mm256_div_ps(_mm256_set1_ps(1.0f), scale[g]);
    squared_error[g] = yc[g] = cc[g] = cs[g] = _mm256_setzero_ps();
  }
  // y = x - mid once per element (n <= 32 here), Σ y² in the reference's order.
  alignas(32) float centred[32];
  static_assert(kInt8FitElementBudget / 4 <= 32, "searched rows (4 candidates or more) fit the buffers");
  float y_squares_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    centred[i] = x[i] - mid_offset;
    y_squares_sum += centred[i] * centred[i];
  }
  for (size_t i = 0; i < n; ++i) {
    const __m256 y = _mm256_set1_ps(centred[i]);
    for (int g = 0; g < 2; ++g) {
      const __m256 code = _mm256_round_ps(_mm256_mul_ps(y, inverse[g]), kNearest);  // never past +-127 here
      const __m256 diff = _mm256_sub_ps(y, _mm256_mul_ps(scale[g], code));
      squared_error[g] = _mm256_add_ps(squared_error[g], _mm256_mul_ps(diff, diff));
      yc[g] = _mm256_add_ps(yc[g], _mm256_mul_ps(y, code));
      cc[g] = _mm256_add_ps(cc[g], _mm256_mul_ps(code, code));
      cs[g] = _mm256_add_ps(cs[g], code);
    }
  }
  const __m256 count = _mm256_set1_ps(static_cast<float>(n)), two = _mm256_set1_ps(2.0f), zero = _mm256_setzero_ps();
  const __m256 y_sum = _mm256_set1_ps(x_sum - static_cast<float>(n) * mid_offset);
  const __m256 y_squares = _mm256_set1_ps(y_squares_sum), inf = _mm256_set1_ps(__builtin_inff());
  const bool power_of_two = (n & (n - 1)) == 0;
  alignas(32) float scales[16], refined_scales[16], offsets[16], inverses[16];
  __m256 own[2], fit[2];
  for (int g = 0; g < 2; ++g) {
    const __m256 det = _mm256_sub_ps(_mm256_mul_ps(count, cc[g]), _mm256_mul_ps(cs[g], cs[g]));
    const __m256 fitted_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(count, yc[g]), _mm256_mul_ps(cs[g], y_sum)), det);
    const __m256 valid = _mm256_and_ps(_mm256_cmp_ps(det, zero, _CMP_GT_OS), _mm256_cmp_ps(fitted_scale, zero, _CMP_GT_OS));
    const __m256 spare = _mm256_sub_ps(y_sum, _mm256_mul_ps(fitted_scale, cs[g]));
    const __m256 shift_fit = power_of_two ? _mm256_mul_ps(spare, _mm256_set1_ps(1.0f / static_cast<float>(n)))
                                          : _mm256_div_ps(spare, count);
    const __m256 offset = _mm256_blendv_ps(mid, f16_round(_mm256_add_ps(mid, shift_fit)), valid);
    const __m256 reach =
        _mm256_max_ps(_mm256_sub_ps(_mm256_set1_ps(hi), offset), _mm256_sub_ps(offset, _mm256_set1_ps(lo)));
    const __m256 refined = f16_at_least(
        _mm256_max_ps(_mm256_and_ps(valid, fitted_scale), _mm256_div_ps(reach, _mm256_set1_ps(kInt8CodeMax + 0.5f))));
    const __m256 shift = _mm256_sub_ps(offset, mid);
    __m256 e = _mm256_sub_ps(y_squares, _mm256_mul_ps(two, _mm256_add_ps(_mm256_mul_ps(shift, y_sum), _mm256_mul_ps(refined, yc[g]))));
    e = _mm256_add_ps(e, _mm256_mul_ps(shift, _mm256_add_ps(_mm256_mul_ps(count, shift), _mm256_mul_ps(two, _mm256_mul_ps(refined, cs[g])))));
    e = _mm256_add_ps(e, _mm256_mul_ps(_mm256_mul_ps(refined, refined), cc[g]));
    own[g] = _mm256_blendv_ps(inf, squared_error[g], _mm256_cmp_ps(squared_error[g], squared_error[g], _CMP_ORD_Q));
    fit[g] = _mm256_blendv_ps(inf, e, _mm256_cmp_ps(e, e, _CMP_ORD_Q));
    _mm256_store_ps(scales + 8 * g, scale[g]);
    _mm256_store_ps(inverses + 8 * g, inverse[g]);
    _mm256_store_ps(refined_scales + 8 * g, refined);
    _mm256_store_ps(offsets + 8 * g, offset);
  }
  // As the AVX-512 build: the smallest finite error, in every lane, then the first candidate
  // holding it, its own error before its refined one.
  __m256 least = _mm256_min_ps(_mm256_min_ps(own[0], fit[0]), _mm256_min_ps(own[1], fit[1]));
  least = _mm256_min_ps(least, _mm256_permute2f128_ps(least, least, 1));
  least = _mm256_min_ps(least, _mm256_permute_ps(least, 0x4E));
  least = _mm256_min_ps(least, _mm256_permute_ps(least, 0xB1));
  if (!(_mm256_cvtss_f32(least) < __builtin_inff())) return false;
  const auto hits = [&](const __m256* v) {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v[0], least, _CMP_EQ_OQ))) |
           (static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v[1], least, _CMP_EQ_OQ))) << 8);
  };
  const unsigned own_hits = hits(own), fit_hits = hits(fit);
  const int l = __builtin_ctz(own_hits | fit_hits);
  if ((own_hits >> l) & 1u) {
    chosen = {scales[l], mid_offset, inverses[l]};
  } else {
    chosen = {refined_scales[l], offsets[l], 1.0f / refined_scales[l]};
  }
  return true;
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
  alignas(32) float maxima[8], poisons[8];
  _mm256_store_ps(maxima, lane_max);
  _mm256_store_ps(poisons, lane_poison);
  float amax = 0, poison = 0;
  for (int l = 0; l < 8; ++l) {
    amax = maxima[l] > amax ? maxima[l] : amax;
    poison += poisons[l];
  }
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
  float lo, hi, x_sum;
  const bool finite = key_row_range(x, n, lo, hi, x_sum);
  if (!finite || !(key_row_max(hi, -lo) <= kKeyF16Max)) {
    std::memset(codes, 0, n);
    return kNaNKeyScaleOffset;
  }
  const float mid_offset = f16_value(0.5f * hi + 0.5f * lo);
  const float half = key_row_max(hi - mid_offset, mid_offset - lo);
  if (!(half > 0)) {
    std::memset(codes, 0, n);
    return pack(0.0f, mid_offset);
  }
  const size_t candidates = int8_key_fit_candidates(n);
  Chosen chosen{};
  if (candidates <= 1 || !search(x, n, candidates, lo, hi, mid_offset, half, x_sum, chosen)) {
    const float scale = f16_scale_at_least(half / kInt8CodeMax);
    chosen = {scale, mid_offset, 1.0f / scale};
  }
  store_int8_codes(x, n, chosen.offset, chosen.inverse, codes);
  return pack(chosen.scale, chosen.offset);
}

}  // namespace pagedkv::detail
