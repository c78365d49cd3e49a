// fp8 e4m3, as the OCP 8-bit floating point specification (v1.0) defines it and vLLM stores its
// fp8 KV cache by default: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits.
//   exponent 1-15: (-1)^s * 2^(e-7) * (1 + m/8); the largest finite value is 448 (S.1111.110);
//   exponent 0:    (-1)^s * 2^-6 * (m/8), subnormals down to 2^-9, and +-0;
//   S.1111.111:    NaN (the only NaN encodings); there are no infinities.
// Encoding rounds to nearest, ties to even, and saturates (OCP's "saturating" mode, which vLLM
// uses for its KV cache): a finite value or infinity beyond 448 becomes +-448. A NaN becomes the
// NaN of its sign. Decoding is exact. Both are plain integer/float code, branch-light, exact to
// the bit; tests/unit/test_storage_quantized.cpp checks all 256 codes.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace pagedkv {

inline constexpr float kFp8E4M3Max = 448.0f;

inline float fp8_e4m3_to_f32(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xFu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7FC00000u);
  // A normal value's bits, rebiased 7 -> 127; a subnormal is m * 2^-9, exact in f32.
  const float magnitude = exponent == 0 ? static_cast<float>(mantissa) * 0x1p-9f
                                        : std::bit_cast<float>(((exponent + 120u) << 23) | (mantissa << 20));
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);  // NaN
  if (ax > 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // beyond 448 (or inf): saturate
  if (ax < 0x3C800000u) {
    // Below 2^-6: a subnormal, a multiple of 2^-9. |f| * 2^9 is exact and nearbyint rounds it
    // to nearest even (the default rounding mode); 8 is the smallest normal's code, 0x08.
    const float steps = std::nearbyint(std::bit_cast<float>(ax) * 0x1p9f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(steps));
  }
  // Normal: keep 3 of the 23 mantissa bits, rounding the 20 dropped bits to nearest even; a carry
  // out of the mantissa bumps the exponent, and 448 rounds to no more than 448.
  const uint32_t odd = (ax >> 20) & 1u;
  const uint32_t rounded = (ax + 0x7FFFFu + odd) >> 20;  // exponent and 3 mantissa bits, bias 127
  return static_cast<uint8_t>(sign | (rounded - (120u << 3)));
}

}  // namespace pagedkv
