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
