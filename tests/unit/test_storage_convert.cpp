// f32 <-> f16/bf16 conversions: exact rounding (round to nearest, ties to even) in the scalar
// path, checked against a double-precision definition; the AVX2/F16C path equal bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <iterator>
#include <limits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {
namespace {

bool have_avx2() { return has_avx2(best_available_isa()); }

// Round-to-nearest-even reference: of the two representable neighbours of x (found by decoding
// every 16-bit pattern once and sorting), pick the nearer, ties to the even pattern.
class Reference16 {
 public:
  explicit Reference16(float (*decode)(uint16_t)) {
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const float v = decode(static_cast<uint16_t>(b));
      if (std::isfinite(v) && !(v == 0 && std::signbit(v)))
        finite_.push_back({static_cast<double>(v), static_cast<uint16_t>(b)});
    }
    std::sort(finite_.begin(), finite_.end(), [](auto a, auto b) { return a.first < b.first; });
    max_finite_ = finite_.back().first;
    // The spacing above the largest finite value: halfway to the next power overflows.
    overflow_at_ = max_finite_ + (max_finite_ - finite_[finite_.size() - 2].first) / 2;
  }
  // Expected encoding of finite x; `inf_bits` is the +infinity pattern.
  uint16_t round(float x, uint16_t inf_bits) const {
    const double v = std::fabs(static_cast<double>(x));
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    if (v >= overflow_at_) return static_cast<uint16_t>(sign | inf_bits);
    if (v > max_finite_)
      return static_cast<uint16_t>(sign | finite_.back().second);  // under the overflow threshold: rounds down
    auto it = std::lower_bound(finite_.begin(), finite_.end(), v, [](auto e, double val) { return e.first < val; });
    if (it->first == v) return static_cast<uint16_t>(sign | it->second);
    auto below = std::prev(it);
    const double d_lo = v - below->first, d_hi = it->first - v;
    uint16_t pick = it->second;
    if (d_lo < d_hi || (d_lo == d_hi && (below->second & 1) == 0)) pick = below->second;
    return static_cast<uint16_t>(sign | pick);
  }

 private:
  std::vector<std::pair<double, uint16_t>> finite_;  // non-negative finite values
  double max_finite_ = 0, overflow_at_ = 0;
};

std::vector<float> interesting_floats(uint64_t seed) {
  std::vector<float> values;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) values.push_back(std::bit_cast<float>(bits(rng)));
  // Every f16 and bf16 value, and the midpoints and their neighbours around them.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    for (float v : {f16_to_f32(static_cast<uint16_t>(b)), bf16_to_f32(static_cast<uint16_t>(b))}) {
      values.push_back(v);
      const uint32_t u = std::bit_cast<uint32_t>(v);
      for (uint32_t delta : {0x1000u, 0x8000u, 0x0FFFu, 0x1001u, 0x7FFFu, 0x8001u})
        values.push_back(std::bit_cast<float>(u + delta));
    }
  }
  for (float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-10f, -1e-10f,
                  3.4028235e38f, -3.4028235e38f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()})
    values.push_back(v);
  return values;
}

TEST(StorageConvert, F16ScalarRoundsToNearestEven) {
  const Reference16 ref(f16_to_f32);
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (float x : interesting_floats(seed)) {
    if (std::isnan(x)) continue;
    const uint16_t expected = std::isinf(x) ? (std::signbit(x) ? 0xFC00 : 0x7C00) : ref.round(x, 0x7C00);
    ASSERT_EQ(f32_to_f16(x), expected) << "x = " << x << " bits 0x" << std::hex << std::bit_cast<uint32_t>(x);
  }
}

TEST(StorageConvert, Bf16ScalarRoundsToNearestEven) {
  const Reference16 ref(bf16_to_f32);
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (float x : interesting_floats(seed)) {
    if (std::isnan(x)) continue;
    const uint16_t expected = std::isinf(x) ? (std::signbit(x) ? 0xFF80 : 0x7F80) : ref.round(x, 0x7F80);
    ASSERT_EQ(f32_to_bf16(x), expected) << "x = " << x << " bits 0x" << std::hex << std::bit_cast<uint32_t>(x);
  }
}

TEST(StorageConvert, WideningIsExactAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = f16_to_f32(h);
    const float g = bf16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_EQ(f32_to_f16(f), h | 0x0200) << "f16 NaN payload is kept and quieted";
    } else {
      EXPECT_EQ(f32_to_f16(f), h) << std::hex << b;
    }
    if (std::isnan(g)) EXPECT_EQ(f32_to_bf16(g), h | 0x0040) << "bf16 NaN is kept and quieted";
    else EXPECT_EQ(f32_to_bf16(g), h) << std::hex << b;
  }
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
}

TEST(StorageConvert, Avx2MatchesScalarBitForBit) {
  if (!have_avx2()) GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::vector<float> values = interesting_floats(seed);
  // NaNs of every kind too: quiet, signalling, with payloads, both signs.
  for (uint32_t payload : {1u, 2u, 0x1FFFu, 0x2000u, 0x3FFFFFu, 0x400000u, 0x400001u, 0x7FFFFFu})
    for (uint32_t sign : {0u, 0x80000000u}) values.push_back(std::bit_cast<float>(sign | 0x7F800000u | payload));
  const size_t n = values.size();
  for (DType t : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> scalar(n), simd(n);
    convert_from_f32(t, values.data(), scalar.data(), n, KernelIsa::kScalar);
    convert_from_f32(t, values.data(), simd.data(), n, KernelIsa::kAvx2);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(scalar[i], simd[i]) << dtype_name(t) << " narrowing of bits 0x" << std::hex
                                    << std::bit_cast<uint32_t>(values[i]);
    std::vector<uint16_t> all(0x10000);
    for (uint32_t b = 0; b < 0x10000; ++b) all[b] = static_cast<uint16_t>(b);
    std::vector<float> wide_scalar(all.size()), wide_simd(all.size());
    convert_to_f32(t, all.data(), wide_scalar.data(), all.size(), KernelIsa::kScalar);
    convert_to_f32(t, all.data(), wide_simd.data(), all.size(), KernelIsa::kAvx2);
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(wide_scalar[i]), std::bit_cast<uint32_t>(wide_simd[i]))
          << dtype_name(t) << " widening of 0x" << std::hex << i;
  }
}

TEST(StorageConvert, UnsupportedTypeIsAnError) {
  float x = 1;
  uint8_t y = 0;
  EXPECT_THROW(convert_from_f32(DType::kInt8, &x, &y, 1), UsageError);
  EXPECT_THROW(convert_to_f32(DType::kFP8, &y, &x, 1), UsageError);
}

// The ISA names parse back to themselves, unknown ones are a ConfigError naming the option, and a
// SIMD path the CPU lacks is refused rather than run.
TEST(CpuIsa, NamesParseAndUnavailablePathsAreRefused) {
  for (KernelIsa isa : {KernelIsa::kAuto, KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512})
    EXPECT_EQ(parse_isa(isa_name(isa), "--isa"), isa);
  try {
    parse_isa("neon", "--isa");
    ADD_FAILURE() << "parse_isa accepted 'neon'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--isa"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("neon"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(has_avx2(KernelIsa::kScalar));
  EXPECT_TRUE(has_avx2(KernelIsa::kAvx2));
  EXPECT_TRUE(has_avx2(KernelIsa::kAvx512));  // AVX-512 CPUs run the AVX2-only code too
  EXPECT_EQ(resolve_isa(KernelIsa::kScalar), KernelIsa::kScalar);
  const KernelIsa best = best_available_isa();
  EXPECT_EQ(resolve_isa(KernelIsa::kAuto), best);
  if (best == KernelIsa::kAvx512) {
    EXPECT_EQ(resolve_isa(KernelIsa::kAvx2), KernelIsa::kAvx2);
  }
  // PAGEDKV_ISA caps only kAuto; without it, `best` is what the hardware has.
  const char* cap = std::getenv("PAGEDKV_ISA");
  if ((cap == nullptr || *cap == '\0') && best != KernelIsa::kAvx512) {
    EXPECT_THROW(resolve_isa(KernelIsa::kAvx512), UsageError);
    if (best == KernelIsa::kScalar) {
      EXPECT_THROW(resolve_isa(KernelIsa::kAvx2), UsageError);
    }
  }
}

}  // namespace
}  // namespace pagedkv
