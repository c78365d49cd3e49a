#include "pagedkv/storage/kv_quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/fp8_e4m3.h"

namespace pagedkv {
namespace {

// max |x|, or NaN when the row holds a NaN or an infinity.
float row_amax(const float* x, size_t n) {
  float amax = 0;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    finite &= std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  return finite ? amax : std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

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
      const float q = std::clamp(std::nearbyint(x[i] * inverse), -kInt8CodeMax, kInt8CodeMax);
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
