#include "pagedkv/storage/kv_quantize.h"

#include <emmintrin.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "pagedkv/core/error.h"
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

// One pass over a row at one step: the codes clamp(round_to_even(x * inverse)) are not stored,
// only what choosing a scale needs: Σ (x - scale * code)², x . code and code . code. Four SSE2
// lanes, as row_amax (a scalar loop's float sums are one serial chain each).
struct RowFit {
  float squared_error, x_dot_code, code_dot_code;
};

RowFit fit_row(const float* x, size_t n, float inverse, float scale) {
  const __m128 inv = _mm_set1_ps(inverse), step = _mm_set1_ps(scale), magic = _mm_set1_ps(12582912.0f);
  const __m128 hi = _mm_set1_ps(kInt8CodeMax), lo = _mm_set1_ps(-kInt8CodeMax);
  __m128 err = _mm_setzero_ps(), xc = _mm_setzero_ps(), cc = _mm_setzero_ps();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    const __m128 rounded = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(v, inv), magic), magic);  // round_to_even
    const __m128 code = _mm_max_ps(lo, _mm_min_ps(hi, rounded));
    const __m128 diff = _mm_sub_ps(v, _mm_mul_ps(step, code));
    err = _mm_add_ps(err, _mm_mul_ps(diff, diff));
    xc = _mm_add_ps(xc, _mm_mul_ps(v, code));
    cc = _mm_add_ps(cc, _mm_mul_ps(code, code));
  }
  float e[4], a[4], b[4];
  _mm_storeu_ps(e, err);
  _mm_storeu_ps(a, xc);
  _mm_storeu_ps(b, cc);
  RowFit fit{(e[0] + e[1]) + (e[2] + e[3]), (a[0] + a[1]) + (a[2] + a[3]), (b[0] + b[1]) + (b[2] + b[3])};
  for (; i < n; ++i) {
    const float code = std::clamp(round_to_even(x[i] * inverse), -kInt8CodeMax, kInt8CodeMax);
    const float diff = x[i] - scale * code;
    fit.squared_error += diff * diff;
    fit.x_dot_code += x[i] * code;
    fit.code_dot_code += code * code;
  }
  return fit;
}

}  // namespace

size_t int8_fitted_scale_candidates(size_t n) {
  return std::clamp<size_t>(kInt8FitElementBudget / std::max<size_t>(n, 1), 1, kInt8FitMaxCandidates);
}

float quantize_row_int8_fitted(const float* x, size_t n, int8_t* codes) {
  const size_t candidates = int8_fitted_scale_candidates(n);
  const float amax = row_amax(x, n);
  if (candidates == 1 || !(amax > 0)) return quantize_row(DType::kInt8, x, n, codes);
  // Below amax / 127.5 the largest element would leave its half step around code 127.
  const float smallest_scale = amax / (kInt8CodeMax + 0.5f);
  float best_scale = amax / kInt8CodeMax;
  float best_error = fit_row(x, n, kInt8CodeMax / amax, best_scale).squared_error;
  for (size_t j = 0; j < candidates; ++j) {
    const float top_code =
        kInt8CodeMax - (kInt8CodeMax - kInt8FitLowestTopCode) * static_cast<float>(j) / static_cast<float>(candidates - 1);
    const float scale = amax / top_code;
    const RowFit at_step = fit_row(x, n, top_code / amax, scale);
    if (at_step.squared_error < best_error) {
      best_error = at_step.squared_error;
      best_scale = scale;
    }
    // The scale that fits these codes best (least squares), with the codes rounded again to it:
    // re-rounding can only lower the error further, and keeps every element within half a step.
    const float refined = at_step.x_dot_code / at_step.code_dot_code;
    if (!(refined >= smallest_scale)) continue;
    const float refined_error = fit_row(x, n, 1.0f / refined, refined).squared_error;
    if (refined_error < best_error) {
      best_error = refined_error;
      best_scale = refined;
    }
  }
  const float inverse = 1.0f / best_scale;
  for (size_t i = 0; i < n; ++i)
    codes[i] = static_cast<int8_t>(std::clamp(round_to_even(x[i] * inverse), -kInt8CodeMax, kInt8CodeMax));
  return best_scale;
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
