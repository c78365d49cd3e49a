// The constants of the attention kernels' exponential, one set for its three builds: exp256 and
// exp512 (attention_tile_simd.h) and the scalar twin's exp_as_simd (attention_tile_scalar.cpp),
// which must agree bit for bit (the int8 path rounds softmax weights to 8-bit codes).
//   e^x: x clamped to [kExpLow, kExpHigh] (below kExpLow: exactly 0); n = round(x log2 e);
//   r = x - n ln2 (Cody-Waite, ln2 = kExpLn2High + kExpLn2Low); e^r = 1 + r + r^2 p(r), p the
//   Cephes degree-5 polynomial (kExpPoly, highest power first); times 2^n. About 1 ulp.
#pragma once

namespace pagedkv::attention_detail {

inline constexpr float kExpLow = -87.33654f, kExpHigh = 88.3762626647949f;
inline constexpr float kExpLog2e = 1.44269504088896341f;
inline constexpr float kExpLn2High = 0.693359375f, kExpLn2Low = -2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace pagedkv::attention_detail
