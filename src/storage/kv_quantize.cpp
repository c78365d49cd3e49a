#include "pagedkv/storage/kv_quantize.h"

#include <emmintrin.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/fp8_e4m3.h"

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

float quantize_row(DType dtype, const float* x, size_t n, void* codes) {
  if (!dtype_has_row_scale(dtype))
    throw UsageError(fmt::format("quantize_row: {} is not a quantized KV dtype (int8, fp8)", dtype_name(dtype)));
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

// One pass over a key row at one (scale, offset): the codes clamp(round_to_even((x - offset) *
// inverse)) are not stored, only what choosing among candidates needs: the squared error, and
// the sums of the least-squares (scale, offset) of those codes (Σ x is the caller's). Four SSE2
// lanes, as row_amax: a scalar loop's float sums are serial chains, and this pass runs up to 32
// times per row.
struct KeyRowFit {
  float squared_error, x_dot_code, code_dot_code, code_sum;
};

float lane_sum(__m128 v) {
  float f[4];
  _mm_storeu_ps(f, v);
  return (f[0] + f[1]) + (f[2] + f[3]);
}

KeyRowFit fit_key_row(const float* x, size_t n, float inverse, float scale, float offset) {
  const __m128 inv = _mm_set1_ps(inverse), step = _mm_set1_ps(scale), off = _mm_set1_ps(offset);
  const __m128 magic = _mm_set1_ps(12582912.0f), top = _mm_set1_ps(kInt8CodeMax), bottom = _mm_set1_ps(-kInt8CodeMax);
  __m128 err = _mm_setzero_ps(), xc = _mm_setzero_ps(), cc = _mm_setzero_ps(), cs = _mm_setzero_ps();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    const __m128 centred = _mm_sub_ps(v, off);
    const __m128 rounded = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(centred, inv), magic), magic);  // round_to_even
    const __m128 code = _mm_max_ps(bottom, _mm_min_ps(top, rounded));
    const __m128 diff = _mm_sub_ps(centred, _mm_mul_ps(step, code));
    err = _mm_add_ps(err, _mm_mul_ps(diff, diff));
    xc = _mm_add_ps(xc, _mm_mul_ps(v, code));
    cc = _mm_add_ps(cc, _mm_mul_ps(code, code));
    cs = _mm_add_ps(cs, code);
  }
  KeyRowFit fit{lane_sum(err), lane_sum(xc), lane_sum(cc), lane_sum(cs)};
  for (; i < n; ++i) {
    const float centred = x[i] - offset;
    const float code = std::clamp(round_to_even(centred * inverse), -kInt8CodeMax, kInt8CodeMax);
    const float diff = centred - scale * code;
    fit.squared_error += diff * diff;
    fit.x_dot_code += x[i] * code;
    fit.code_dot_code += code * code;
    fit.code_sum += code;
  }
  return fit;
}

// The row's smallest and largest element and its sum, in SSE2 lanes; false if it holds a NaN or
// an infinity (the poison sum of row_amax).
bool row_range(const float* x, size_t n, float& lo, float& hi, float& sum) {
  __m128 lane_lo = _mm_set1_ps(std::numeric_limits<float>::infinity()), lane_hi = _mm_set1_ps(-std::numeric_limits<float>::infinity());
  __m128 lane_sum_v = _mm_setzero_ps(), lane_poison = _mm_setzero_ps();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    lane_lo = _mm_min_ps(lane_lo, v);
    lane_hi = _mm_max_ps(lane_hi, v);
    lane_sum_v = _mm_add_ps(lane_sum_v, v);
    lane_poison = _mm_add_ps(lane_poison, _mm_mul_ps(v, _mm_setzero_ps()));
  }
  float los[4], his[4];
  _mm_storeu_ps(los, lane_lo);
  _mm_storeu_ps(his, lane_hi);
  lo = std::min(std::min(los[0], los[1]), std::min(los[2], los[3]));
  hi = std::max(std::max(his[0], his[1]), std::max(his[2], his[3]));
  sum = lane_sum(lane_sum_v);
  float poison = lane_sum(lane_poison);
  for (; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum += x[i];
    poison += x[i] * 0.0f;
  }
  return poison == 0.0f;
}

float f16_value(float x) { return f16_to_f32(f32_to_f16(x)); }

// The smallest f16 scale >= `at_least` (f16 rounds to nearest; one step up if that fell short).
float f16_scale_at_least(float at_least) {
  uint16_t h = f32_to_f16(at_least);
  if (f16_to_f32(h) < at_least) ++h;  // positive: the next code is the next value up
  return f16_to_f32(h);
}

}  // namespace

bool int8_keys_have_offsets(DType dtype) { return dtype == DType::kInt8; }

uint32_t pack_key_scale_offset(float scale, float offset) {
  return static_cast<uint32_t>(f32_to_f16(scale)) | (static_cast<uint32_t>(f32_to_f16(offset)) << 16);
}

KeyScaleOffset unpack_key_scale_offset(uint32_t packed) {
  return {f16_to_f32(static_cast<uint16_t>(packed & 0xFFFFu)), f16_to_f32(static_cast<uint16_t>(packed >> 16))};
}

uint32_t quantize_key_row_int8(const float* x, size_t n, int8_t* codes) {
  if (n == 0) return pack_key_scale_offset(0.0f, 0.0f);
  float lo, hi, x_sum;
  const bool finite = row_range(x, n, lo, hi, x_sum);
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
    const float count = static_cast<float>(n);
    for (size_t j = 0; j < candidates; ++j) {
      const float top_code =
          kInt8CodeMax - (kInt8CodeMax - kInt8FitLowestTopCode) * static_cast<float>(j) / static_cast<float>(candidates - 1);
      const float scale = j == 0 ? best_scale : f16_scale_at_least(half / top_code);
      const KeyRowFit at_step = fit_key_row(x, n, 1.0f / scale, scale, mid_offset);
      if (at_step.squared_error < best_error) {
        best_error = at_step.squared_error;
        best_scale = scale;
        best_offset = mid_offset;
      }
      // The least-squares scale and offset of these codes, in f16, the codes rounded again.
      const float det = count * at_step.code_dot_code - at_step.code_sum * at_step.code_sum;
      if (!(det > 0)) continue;
      const float fitted_scale = (count * at_step.x_dot_code - at_step.code_sum * x_sum) / det;
      const float fitted_offset = f16_value((x_sum - fitted_scale * at_step.code_sum) / count);
      if (!(fitted_scale > 0) || !std::isfinite(fitted_offset)) continue;
      const float reach = std::max(hi - fitted_offset, fitted_offset - lo);
      const float refined = f16_scale_at_least(std::max(fitted_scale, reach / (kInt8CodeMax + 0.5f)));
      const float refined_error = fit_key_row(x, n, 1.0f / refined, refined, fitted_offset).squared_error;
      if (refined_error < best_error) {
        best_error = refined_error;
        best_scale = refined;
        best_offset = fitted_offset;
      }
    }
  }
  const float inverse = 1.0f / best_scale;
  for (size_t i = 0; i < n; ++i)
    codes[i] =
        static_cast<int8_t>(std::clamp(round_to_even((x[i] - best_offset) * inverse), -kInt8CodeMax, kInt8CodeMax));
  return pack_key_scale_offset(best_scale, best_offset);
}

size_t int8_key_fit_candidates(size_t n) {
  return std::clamp<size_t>(kInt8FitElementBudget / std::max<size_t>(n, 1), 1, kInt8FitMaxCandidates);
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
