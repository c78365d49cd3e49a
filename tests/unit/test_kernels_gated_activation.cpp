// silu_gate (kernels/gated_activation.h): the AVX2 and AVX-512 builds against the scalar twin,
// bit for bit, over random and special values, every length up to a few vectors (the tails) and
// in place; and the twin against silu(g) * up in float64.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "pagedkv/kernels/gated_activation.h"

namespace pagedkv {
namespace {

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

std::vector<KernelIsa> simd_isas() {
  std::vector<KernelIsa> isas;
  const KernelIsa best = best_available_isa();
  if (has_avx2(best)) isas.push_back(KernelIsa::kAvx2);
  if (best == KernelIsa::kAvx512) isas.push_back(KernelIsa::kAvx512);
  return isas;
}

// Gates of every kind: a forward pass's (normal, a few units), wide, tiny, and the edges of the
// exponential's range, zeros, infinities and NaN.
std::vector<float> gates(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            87.33654f,
                            -87.33654f,
                            -88.3762626647949f,
                            88.3762626647949f,
                            1e-30f,
                            -1e-40f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max()};
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t kind = rng() % 8;
    g[i] = kind < 5 ? normal(rng) : kind < 7 ? wide(rng) : specials[rng() % std::size(specials)];
  }
  return g;
}

TEST(GatedActivation, SimdBuildsGiveTheTwinsBitsAtEveryLength) {
  const std::vector<KernelIsa> isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (size_t n = 0; n <= 67; ++n) {
    const std::vector<float> g = gates(n + 1, static_cast<uint32_t>(n));
    std::vector<float> up = gates(n + 1, static_cast<uint32_t>(1000 + n));
    // offset by one value: unaligned loads and stores
    std::vector<float> twin(n + 1), simd(n + 1);
    silu_gate(g.data() + 1, up.data() + 1, twin.data() + 1, n, KernelIsa::kScalar);
    for (KernelIsa isa : isas) {
      silu_gate(g.data() + 1, up.data() + 1, simd.data() + 1, n, isa);
      for (size_t i = 1; i <= n; ++i)
        ASSERT_TRUE(same_bits(twin[i], simd[i])) << isa_name(isa) << " n=" << n << " i=" << i << " gate=" << g[i]
                                                 << " up=" << up[i] << ": " << twin[i] << " vs " << simd[i];
    }
  }
}

TEST(GatedActivation, InPlaceOverTheGateEqualsOutOfPlace) {
  const std::vector<float> g = gates(4099, 7), up = gates(4099, 8);
  for (KernelIsa isa : {KernelIsa::kScalar, KernelIsa::kAuto}) {
    std::vector<float> out(g.size()), in_place = g;
    silu_gate(g.data(), up.data(), out.data(), g.size(), isa);
    silu_gate(in_place.data(), up.data(), in_place.data(), g.size(), isa);
    for (size_t i = 0; i < g.size(); ++i) ASSERT_TRUE(same_bits(out[i], in_place[i])) << i;
  }
}

TEST(GatedActivation, TwinIsCloseToSiluInFloat64) {
  const size_t n = 200000;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> gate_range(-90.0f, 90.0f), up_range(-4.0f, 4.0f);
  std::vector<float> g(n), up(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = i % 2 ? gate_range(rng) : gate_range(rng) / 16;  // half of them in a forward pass's range
    up[i] = up_range(rng);
  }
  silu_gate(g.data(), up.data(), out.data(), n, KernelIsa::kScalar);
  for (size_t i = 0; i < n; ++i) {
    const double x = g[i];
    const double expected = x / (1.0 + std::exp(-x)) * up[i];
    // A few ulp of the result, or (far left, where silu underflows to 0 in float64's terms too)
    // an absolute bound far below any activation's size.
    ASSERT_NEAR(out[i], expected, std::abs(expected) * 4e-7 + 1e-30) << "gate " << g[i] << " up " << up[i];
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float special_g[] = {0.0f, inf, std::numeric_limits<float>::quiet_NaN(), -120.0f};
  const float special_up[] = {5.0f, 2.0f, 1.0f, 1.0f};
  float special_out[4];
  silu_gate(special_g, special_up, special_out, 4, KernelIsa::kScalar);
  EXPECT_EQ(special_out[0], 0.0f);
  EXPECT_EQ(special_out[1], inf);
  EXPECT_TRUE(std::isnan(special_out[2]));
  EXPECT_LE(std::abs(special_out[3]), 1e-35f);
}

}  // namespace
}  // namespace pagedkv
