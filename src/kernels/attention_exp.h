// The constants of the attention kernels' exponential, one set for its three builds: exp256 and
// exp512 (attention_tile_simd.h) and the scalar twin's exp_as_simd (attention_tile_scalar.cpp),
// which must agree bit for bit (the int8 path rounds softmax weights to 8-bit codes).
//   e^x: x clamped to [kExpLow, kExpHigh] (below kExpLow: exactly 0); n = round(x log2 e);
//   r = x - n ln2 (Cody-Waite, ln2 = kExpLn2High + kExpLn2Low); e^r = 1 + r + r^2 p(r), p the
//   Cephes degree-5 polynomial (kExpPoly, highest power first); times 2^n. About 1 ulp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pagedkv::attention_detail {

inline constexpr float kExpLow = -87.33654f, kExpHigh = 88.3762626647949f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpLn2High = 0.693359375f, kExpLn2Low = -2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// The vector exp of one lane in scalar code (the scalar twins' exp), bit for bit.
inline float exp_as_simd(float x) {
  const bool underflow = x < kExpLow;
  x = x > kExpLow ? x : kExpLow;
  x = x < kExpHigh ? x : kExpHigh;
  const float n = std::nearbyint(x * kExpLog2e);
  float r = std::fma(-n, kExpLn2High, x);
  r = std::fma(-n, kExpLn2Low, r);
  float p = kExpPoly[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kExpPoly[i]);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const auto bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return underflow ? 0.0f : y * two_n;
}

}  // namespace pagedkv::attention_detail
