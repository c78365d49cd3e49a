// Float-to-int8 conversions for quantizing rows, defined for every input: NaN becomes 0 and values
// beyond int8 saturate (a model file's NaN or infinite weights reach the activations, and a plain
// cast of those is undefined behaviour). For the finite, in-range values of real models they equal
// the plain casts, which are ggml's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace pagedkv {

// To the nearest integer, ties to even (the default rounding mode, as the SIMD conversions round).
inline int8_t rounded_int8(float v) {
  if (std::isnan(v)) return 0;
  return static_cast<int8_t>(std::clamp(std::nearbyint(v), -128.0f, 127.0f));
}

// Toward zero, as a cast truncates.
inline int8_t truncated_int8(float v) {
  if (std::isnan(v)) return 0;
  return static_cast<int8_t>(std::clamp(v, -128.0f, 127.0f));
}

}  // namespace pagedkv
