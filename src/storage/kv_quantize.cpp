#include "pagedkv/storage/kv_quantize.h"

#include <emmintrin.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/fp8_e4m3.h"
#include "kv_quantize_simd.h"

namespace pagedkv {

// Four lanes of SSE2 (baseline x86-64) and a poison sum (x * 0 is 0 for a finite x, NaN
// otherwise): one running maximum with an isfinite test per element was a serial chain, 3/4 of
// write_kv's int8 time.
float row_amax(const float* x, size_t n) {
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  __m128 lane_max = _mm_setzero_ps(), lane_poison = _mm_setzero_ps();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    lane_max = _mm_max_ps(lane_max, _mm_and_ps(v, abs_mask));  // a NaN is caught by the poison
    lane_poison = _mm_add_ps(lane_poison, _mm_mul_ps(v, _mm_setzero_ps()));
  }
  float maxima[4], poisons[4];
  _mm_storeu_ps(maxima, lane_max);
  _mm_storeu_ps(poisons, lane_poison);
  float amax = 0, poison = 0;
  for (int l = 0; l < 4; ++l) {
    amax = maxima[l] > amax ? maxima[l] : amax;
    poison += poisons[l];
  }
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
    poison += x[i] * 0.0f;
  }
  return poison == 0.0f ? amax : std::numeric_limits<float>::quiet_NaN();
}

float quantize_row(DType dtype, const float* x, size_t n, void* codes, KernelIsa isa) {
  if (!dtype_has_row_scale(dtype))
    throw UsageError(fmt::format("quantize_row: {} is not a quantized KV dtype (int8, fp8)", dtype_name(dtype)));
  if (dtype == DType::kInt8) {
    const KernelIsa resolved = resolve_isa(isa);
    if (resolved == KernelIsa::kAvx512)
      return detail::quantize_value_row_int8_avx512(x, n, static_cast<int8_t*>(codes));
    if (resolved == KernelIsa::kAvx2) return detail::quantize_value_row_int8_avx2(x, n, static_cast<int8_t*>(codes));
  }
  const float amax = row_amax(x, n);
  const float code_max = dtype == DType::kInt8 ? kInt8CodeMax : kFp8E4M3Max;
  if (!(amax > 0)) {  // zero row, or NaN
    std::fill_n(static_cast<uint8_t*>(codes), n, uint8_t{0});
    return amax == 0 ? 0.0f : amax;
  }
  const float scale = amax / code_max;
  const float inverse = code_max / amax;
  if (dtype == DType::kInt8) {
    auto* out = static_cast<int8_t*>(codes);
    for (size_t i = 0; i < n; ++i) {
      const float q = std::clamp(round_to_even(x[i] * inverse), -kInt8CodeMax, kInt8CodeMax);
      out[i] = static_cast<int8_t>(q);
    }
  } else {
    auto* out = static_cast<uint8_t*>(codes);
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_fp8_e4m3(x[i] * inverse);
  }
  return scale;
}

namespace {

// f16 values in SSE2 lanes (|v| <= 65504): 11 significant bits from 2^-14 up (Veltkamp's split
// rounds to nearest), multiples of 2^-24 below (the f16 subnormals; 0.75's f32 spacing is 2^-24).
// Each lane is exactly an f16 value, so packing it with f32_to_f16 loses nothing.
__m128 f16_round(__m128 v) {
  const __m128 c = _mm_mul_ps(v, _mm_set1_ps(8193.0f));  // 2^13 + 1
  const __m128 normal = _mm_sub_ps(c, _mm_sub_ps(c, v));
  const __m128 subnormal = _mm_sub_ps(_mm_add_ps(v, _mm_set1_ps(0.75f)), _mm_set1_ps(0.75f));
  const __m128 magnitude = _mm_and_ps(v, _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)));
  const __m128 tiny = _mm_cmplt_ps(magnitude, _mm_set1_ps(0x1p-14f));
  return _mm_or_ps(_mm_and_ps(tiny, subnormal), _mm_andnot_ps(tiny, normal));
}

// The smallest f16 values >= need (> 0), in lanes: rounded, then one f16 step up where that fell
// short (2^(e - 10) for a normal f16 of exponent e, 2^-24 for a subnormal one).
__m128 f16_at_least(__m128 need) {
  const __m128 rounded = f16_round(need);
  const __m128 power = _mm_and_ps(rounded, _mm_castsi128_ps(_mm_set1_epi32(0x7f800000)));
  const __m128 step = _mm_max_ps(_mm_mul_ps(power, _mm_set1_ps(0x1p-10f)), _mm_set1_ps(0x1p-24f));
  return _mm_add_ps(rounded, _mm_and_ps(_mm_cmplt_ps(rounded, need), step));
}

// Σ over the row of (y - scale * code)², y = x - offset, for G groups of four scales at once, one
// per lane, code = clamp(round_to_even(y * inverse)); and per lane what the least-squares (scale,
// offset) of those codes needs: Σ y code, Σ code², Σ code. The G groups go through one loop over
// the row, so that their chains of sums overlap.
template <int G>
struct LaneFit {
  __m128 squared_error[G], y_dot_code[G], code_dot_code[G], code_sum[G];
};

template <int G>
LaneFit<G> fit_lanes(const float* x, size_t n, const __m128* scale, const __m128* inverse, __m128 offset) {
  const __m128 magic = _mm_set1_ps(12582912.0f), top = _mm_set1_ps(kInt8CodeMax), bottom = _mm_set1_ps(-kInt8CodeMax);
  LaneFit<G> f;
  for (int g = 0; g < G; ++g)
    f.squared_error[g] = f.y_dot_code[g] = f.code_dot_code[g] = f.code_sum[g] = _mm_setzero_ps();
  for (size_t i = 0; i < n; ++i) {
    const __m128 centred = _mm_sub_ps(_mm_set1_ps(x[i]), offset);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m128 rounded = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(centred, inverse[g]), magic), magic);  // round_to_even
      const __m128 code = _mm_max_ps(bottom, _mm_min_ps(top, rounded));
      const __m128 diff = _mm_sub_ps(centred, _mm_mul_ps(scale[g], code));
      f.squared_error[g] = _mm_add_ps(f.squared_error[g], _mm_mul_ps(diff, diff));
      f.y_dot_code[g] = _mm_add_ps(f.y_dot_code[g], _mm_mul_ps(centred, code));
      f.code_dot_code[g] = _mm_add_ps(f.code_dot_code[g], _mm_mul_ps(code, code));
      f.code_sum[g] = _mm_add_ps(f.code_sum[g], code);
    }
  }
  return f;
}

// The search of quantize_key_row_int8 over `candidates` <= 4 G steps (a lane past the last
// repeats it): each step's codes around the midpoint, then the least-squares scale and offset of
// those codes, in f16; updates the best (error, scale, offset). A refined pair is judged by the
// error of the step's codes under it, in closed form from the pass's sums (no second pass): the
// codes rounded again to the pair, as they will be stored, can only do better.
struct KeyRowSearch {
  const float* x;
  size_t n, candidates;
  float lo, hi, mid_offset, half;
  float centred_sum, centred_squares;  // Σ (x - mid_offset), Σ (x - mid_offset)²
};

template <int G>
void search_key_steps(const KeyRowSearch& r, float& best_error, float& best_scale, float& best_offset) {
  const __m128 count = _mm_set1_ps(static_cast<float>(r.n)), one = _mm_set1_ps(1.0f), two = _mm_set1_ps(2.0f);
  const __m128 y_sum = _mm_set1_ps(r.centred_sum), y_squares = _mm_set1_ps(r.centred_squares);
  const __m128 mid = _mm_set1_ps(r.mid_offset), high = _mm_set1_ps(r.hi), low = _mm_set1_ps(r.lo);
  const float top_step = (kInt8CodeMax - kInt8FitLowestTopCode) / static_cast<float>(r.candidates - 1);
  __m128 scale[G], inverse[G];
  for (int g = 0; g < G; ++g) {
    float top_codes[4];
    for (size_t l = 0; l < 4; ++l)
      top_codes[l] =
          kInt8CodeMax - top_step * static_cast<float>(std::min(4 * static_cast<size_t>(g) + l, r.candidates - 1));
    scale[g] = f16_at_least(_mm_div_ps(_mm_set1_ps(r.half), _mm_loadu_ps(top_codes)));
    inverse[g] = _mm_div_ps(one, scale[g]);
  }
  const LaneFit<G> f = fit_lanes<G>(r.x, r.n, scale, inverse, mid);
  for (int g = 0; g < G; ++g) {
    // y ~ scale * code + shift, shift = offset - midpoint; a lane without a least-squares fit
    // (det <= 0: all codes equal) keeps the midpoint.
    const __m128 yc = f.y_dot_code[g], cc = f.code_dot_code[g], cs = f.code_sum[g];
    const __m128 det = _mm_sub_ps(_mm_mul_ps(count, cc), _mm_mul_ps(cs, cs));
    const __m128 fitted_scale = _mm_div_ps(_mm_sub_ps(_mm_mul_ps(count, yc), _mm_mul_ps(cs, y_sum)), det);
    const __m128 valid = _mm_and_ps(_mm_cmpgt_ps(det, _mm_setzero_ps()), _mm_cmpgt_ps(fitted_scale, _mm_setzero_ps()));
    const __m128 fitted_offset =
        f16_round(_mm_add_ps(mid, _mm_div_ps(_mm_sub_ps(y_sum, _mm_mul_ps(fitted_scale, cs)), count)));
    const __m128 offset = _mm_or_ps(_mm_and_ps(valid, fitted_offset), _mm_andnot_ps(valid, mid));
    const __m128 reach = _mm_max_ps(_mm_sub_ps(high, offset), _mm_sub_ps(offset, low));
    const __m128 refined =
        f16_at_least(_mm_max_ps(_mm_and_ps(valid, fitted_scale), _mm_div_ps(reach, _mm_set1_ps(kInt8CodeMax + 0.5f))));
    // Σ (y - shift - refined code)² = Σy² - 2 shift Σy - 2 refined Σyc + n shift² + 2 refined shift Σc + refined² Σc².
    const __m128 shift = _mm_sub_ps(offset, mid);
    __m128 e = _mm_sub_ps(y_squares, _mm_mul_ps(two, _mm_add_ps(_mm_mul_ps(shift, y_sum), _mm_mul_ps(refined, yc))));
    e = _mm_add_ps(e,
                   _mm_mul_ps(shift, _mm_add_ps(_mm_mul_ps(count, shift), _mm_mul_ps(two, _mm_mul_ps(refined, cs)))));
    e = _mm_add_ps(e, _mm_mul_ps(_mm_mul_ps(refined, refined), cc));
    float errors[4], scales[4], refined_errors[4], refined_scales[4], offsets[4];
    _mm_storeu_ps(errors, f.squared_error[g]);
    _mm_storeu_ps(scales, scale[g]);
    _mm_storeu_ps(refined_errors, e);
    _mm_storeu_ps(refined_scales, refined);
    _mm_storeu_ps(offsets, offset);
    for (size_t l = 0; l < 4; ++l) {
      if (errors[l] < best_error) {
        best_error = errors[l];
        best_scale = scales[l];
        best_offset = r.mid_offset;
      }
      if (refined_errors[l] < best_error) {
        best_error = refined_errors[l];
        best_scale = refined_scales[l];
        best_offset = offsets[l];
      }
    }
  }
}

float f16_value(float x) { return f16_to_f32(f32_to_f16(x)); }

// The smallest f16 scale >= `at_least` (f16 rounds to nearest; one step up if that fell short).
float f16_scale_at_least(float at_least) {
  uint16_t h = f32_to_f16(at_least);
  if (f16_to_f32(h) < at_least) ++h;  // positive: the next code is the next value up
  return f16_to_f32(h);
}

}  // namespace

uint32_t pack_key_scale_offset(float scale, float offset) {
  return static_cast<uint32_t>(f32_to_f16(scale)) | (static_cast<uint32_t>(f32_to_f16(offset)) << 16);
}

KeyScaleOffset unpack_key_scale_offset(uint32_t packed) {
  return {f16_to_f32(static_cast<uint16_t>(packed & 0xFFFFu)), f16_to_f32(static_cast<uint16_t>(packed >> 16))};
}

uint32_t quantize_key_row_int8(const float* x, size_t n, int8_t* codes, KernelIsa isa) {
  if (n == 0) return pack_key_scale_offset(0.0f, 0.0f);
  const KernelIsa resolved = resolve_isa(isa);
  if (resolved == KernelIsa::kAvx512) return detail::quantize_key_row_int8_avx512(x, n, codes);
  if (resolved == KernelIsa::kAvx2) return detail::quantize_key_row_int8_avx2(x, n, codes);
  return detail::quantize_key_row_int8_sse2(x, n, codes);
}

// The reference build: SSE2, four candidates per lane group (search_key_steps).
uint32_t detail::quantize_key_row_int8_sse2(const float* x, size_t n, int8_t* codes) {
  float lo, hi, x_sum;
  const bool finite = detail::key_row_range(x, n, lo, hi, x_sum);
  const float mid_offset = f16_value(0.5f * hi + 0.5f * lo);
  // Every element within kKeyF16Max: the f16 offset and the scale (at most the range / 223) stay finite.
  if (!finite || !(std::max(hi, -lo) <= kKeyF16Max)) {
    std::fill_n(codes, n, int8_t{0});
    return kNaNKeyScaleOffset;
  }
  const float half = std::max(hi - mid_offset, mid_offset - lo);  // the f16 offset's, not the exact midpoint's
  if (!(half > 0)) {
    std::fill_n(codes, n, int8_t{0});  // every element is the offset
    return pack_key_scale_offset(0.0f, mid_offset);
  }
  // At least half / 127.5, so that no element leaves its half step around +-127.
  float best_scale = f16_scale_at_least(half / kInt8CodeMax), best_offset = mid_offset;
  const size_t candidates = int8_key_fit_candidates(n);
  if (candidates > 1) {
    float best_error = std::numeric_limits<float>::infinity();
    float centred_squares = 0;
    for (size_t i = 0; i < n; ++i) centred_squares += (x[i] - mid_offset) * (x[i] - mid_offset);
    const KeyRowSearch search{
        x, n, candidates, lo, hi, mid_offset, half, x_sum - static_cast<float>(n) * mid_offset, centred_squares};
    switch ((candidates + 3) / 4) {  // groups of four candidates, one per SSE2 lane
      case 1:
        search_key_steps<1>(search, best_error, best_scale, best_offset);
        break;
      case 2:
        search_key_steps<2>(search, best_error, best_scale, best_offset);
        break;
      case 3:
        search_key_steps<3>(search, best_error, best_scale, best_offset);
        break;
      default:
        search_key_steps<4>(search, best_error, best_scale, best_offset);
        break;
    }
  }
  const float inverse = 1.0f / best_scale;
  for (size_t i = 0; i < n; ++i)
    codes[i] =
        static_cast<int8_t>(std::clamp(round_to_even((x[i] - best_offset) * inverse), -kInt8CodeMax, kInt8CodeMax));
  return pack_key_scale_offset(best_scale, best_offset);
}

void dequantize_row(DType dtype, const void* codes, float scale, size_t n, float* out) {
  if (dtype == DType::kInt8) {
    const auto* in = static_cast<const int8_t*>(codes);
    for (size_t i = 0; i < n; ++i) out[i] = scale * static_cast<float>(in[i]);
  } else if (dtype == DType::kFP8) {
    const auto* in = static_cast<const uint8_t*>(codes);
    for (size_t i = 0; i < n; ++i) out[i] = scale * fp8_e4m3_to_f32(in[i]);
  } else {
    throw UsageError(fmt::format("dequantize_row: {} is not a quantized KV dtype (int8, fp8)", dtype_name(dtype)));
  }
}

}  // namespace pagedkv
