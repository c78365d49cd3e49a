// Conversions between f32 and the 16-bit storage types, exact to the bit.
//
// f32 -> f16 and f32 -> bf16 round to nearest, ties to even; overflow gives infinity and
// values below half the smallest f16 subnormal give (signed) zero, as IEEE 754 says. NaNs stay
// NaNs of the same sign, made quiet, keeping the top payload bits: exactly what the F16C
// instructions (vcvtps2ph / vcvtph2ps) do, so the scalar and AVX2 paths agree bit for bit.
// f16 -> f32 and bf16 -> f32 are exact.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "pagedkv/core/dtype.h"
#include "pagedkv/storage/cpu_isa.h"

namespace pagedkv {

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // inf or NaN
    if (ax == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
    return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  }
  // 65520 is halfway between the largest half (65504, odd mantissa) and 65536: ties go to inf.
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (ax < 0x38800000u) {
    // Below 2^-14: an f16 subnormal (or zero), a multiple of 2^-24. Adding 0.5 puts the value
    // in [0.5, 1), where the f32 spacing is exactly 2^-24, so the FPU's own round-to-nearest-
    // even does the rounding and the low mantissa bits are the subnormal's mantissa.
    const float shifted = std::bit_cast<float>(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3F000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
  // a carry out of the mantissa correctly bumps the exponent.
  const uint32_t odd = (ax >> 13) & 1u;
  const uint32_t rounded = ax + 0xC8000FFFu + odd;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

// Masks, no branches, so that loops over it vectorise (the scalar kernels convert whole rows).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t bits = static_cast<uint32_t>(h & 0x7FFFu) << 13;  // exponent and mantissa, f32 positions
  const uint32_t exponent = bits & 0x0F800000u;
  const uint32_t normal = bits + 0x38000000u;  // rebias the exponent: 15 -> 127
  // Inf and NaN; a NaN is made quiet, as vcvtph2ps does.
  const uint32_t special = bits | 0x7F800000u | (static_cast<uint32_t>((bits & 0x007FE000u) != 0) << 22);
  // Zero and subnormals, m * 2^-24: (2^-14 + m * 2^-24) - 2^-14 is exact.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(bits + 0x38800000u) - 0x1p-14f);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exponent == 0);  // all ones or zero
  const uint32_t is_special = 0u - static_cast<uint32_t>(exponent == 0x0F800000u);
  const uint32_t magnitude =
      (subnormal & is_subnormal) | (special & is_special) | (normal & ~(is_subnormal | is_special));
  return std::bit_cast<float>(sign | magnitude);
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const uint32_t odd = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7FFFu + odd) >> 16);
}

inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Bulk conversions of n elements between f32 and a storage dtype (f32, f16 or bf16; f32 is a
// copy). Throws UsageError for another dtype. `isa` picks the scalar or the AVX2 path; both
// produce identical bits.
void convert_from_f32(DType dst_type, const float* src, void* dst, size_t n, KernelIsa isa = KernelIsa::kAuto);
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n, KernelIsa isa = KernelIsa::kAuto);

}  // namespace pagedkv
