// make_query_row_codes (kernels/query_codes.h): the AVX2 version against the scalar twin, bit for
// bit, over random and special rows of every head size, rotated or not; and both against a
// float64 reference (the codes within half a step of the scaled, rotated row; the sum close).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "pagedkv/kernels/query_codes.h"
#include "pagedkv/storage/key_rotation.h"

namespace pagedkv {
namespace {

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// The scaled row rotated in float64: (H x)[i] = sum_j (-1)^popcount(i & j) x[j] / sqrt(n).
std::vector<double> reference_row(const std::vector<float>& q, float scale, bool rotate) {
  const size_t n = q.size();
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(q[i] * scale);
  if (!rotate) return x;
  std::vector<double> y(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) y[i] += (std::popcount(i & j) % 2 ? -x[j] : x[j]);
  for (double& v : y) v /= std::sqrt(static_cast<double>(n));
  return y;
}

struct Made {
  QueryRowCodes result;
  std::vector<int16_t> codes;
};

Made make(const std::vector<float>& q, float scale, bool rotate, KernelIsa isa) {
  Made m;
  m.codes.assign(padded_query_dim(q.size()) + 8, int16_t{0x5a5a});  // poisoned: the padding must be written
  m.result = make_query_row_codes(q.data(), q.size(), scale, rotate, m.codes.data(), isa);
  return m;
}

void expect_twins(const std::vector<float>& q, float scale, bool rotate, const char* what) {
  const Made scalar = make(q, scale, rotate, KernelIsa::kScalar);
  const size_t padded = padded_query_dim(q.size());
  for (size_t d = q.size(); d < padded; ++d) ASSERT_EQ(scalar.codes[d], 0) << what << " padding " << d;
  ASSERT_EQ(scalar.codes[padded], int16_t{0x5a5a}) << what << ": wrote past the padded row";
  if (!has_avx2(best_available_isa())) return;
  const Made simd = make(q, scale, rotate, KernelIsa::kAvx2);
  EXPECT_TRUE(same_bits(simd.result.scale, scalar.result.scale))
      << what << " dim " << q.size() << ": scale " << simd.result.scale << " vs " << scalar.result.scale;
  EXPECT_TRUE(same_bits(simd.result.sum, scalar.result.sum))
      << what << " dim " << q.size() << ": sum " << simd.result.sum << " vs " << scalar.result.sum;
  for (size_t d = 0; d < padded + 8; ++d)
    ASSERT_EQ(simd.codes[d], scalar.codes[d]) << what << " dim " << q.size() << " element " << d;
}

bool power_of_two(size_t n) { return n >= 2 && (n & (n - 1)) == 0; }

TEST(QueryRowCodes, SimdMatchesScalarTwinBitForBit) {
  std::mt19937 rng(20261126);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (size_t dim : {8u, 16u, 24u, 32u, 40u, 64u, 96u, 128u, 200u, 256u, 512u, 520u, 1024u}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> q(dim);
      for (float& v : q) v = trial % 2 ? normal(rng) : uniform(rng);
      if (trial % 5 == 0) q[rng() % dim] *= 300.0f;  // an outlier channel
      if (trial % 7 == 0)
        for (float& v : q) v *= 1e-30f;  // subnormal products after the scale
      const float scale = trial % 3 ? 1.0f / std::sqrt(static_cast<float>(dim)) : 0.7f;
      for (bool rotate : {false, true}) {
        if (rotate && (!power_of_two(dim) || dim > kMaxRotatedHeadDim)) continue;
        expect_twins(q, scale, rotate, "random");
      }
    }
  }
}

TEST(QueryRowCodes, SpecialRows) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (size_t dim : {8u, 64u, 128u}) {
    for (bool rotate : {false, true}) {
      std::vector<float> zero(dim, 0.0f);
      expect_twins(zero, 0.125f, rotate, "zero");
      const Made z = make(zero, 0.125f, rotate, KernelIsa::kAuto);
      EXPECT_EQ(z.result.scale, 0.0f);
      EXPECT_EQ(z.result.sum, 0.0f);
      for (float bad : {nan, inf, -inf}) {
        std::vector<float> q(dim, 0.5f);
        q[dim / 2] = bad;
        expect_twins(q, 0.125f, rotate, "non-finite");
        const Made m = make(q, 0.125f, rotate, KernelIsa::kAuto);
        EXPECT_TRUE(std::isnan(m.result.scale)) << bad;  // the row's output becomes NaN, as with f32 K/V
        for (size_t d = 0; d < dim; ++d) EXPECT_EQ(m.codes[d], 0);
      }
      std::vector<float> huge(dim, 3e38f);  // finite, but its rotation overflows: a NaN scale, not a crash
      expect_twins(huge, 1.0f, rotate, "overflowing");
      std::vector<float> constant(dim, -2.0f);
      expect_twins(constant, 0.5f, rotate, "constant");
    }
  }
}

TEST(QueryRowCodes, CodesWithinHalfAStepOfTheRotatedRow) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (size_t dim : {6u, 8u, 64u, 128u, 256u, 96u}) {
    for (bool rotate : {false, true}) {
      if (rotate && !power_of_two(dim)) continue;
      for (KernelIsa isa : {KernelIsa::kScalar, KernelIsa::kAuto}) {
        std::vector<float> q(dim);
        for (float& v : q) v = normal(rng);
        const float scale = 0.09f;
        const std::vector<double> ref = reference_row(q, scale, rotate);
        const Made m = make(q, scale, rotate, isa);
        double amax = 0, sum = 0, magnitude = 0;
        for (size_t d = 0; d < dim; ++d) {
          amax = std::max(amax, std::fabs(ref[d]));
          sum += ref[d];
          magnitude += std::fabs(ref[d]);
        }
        const double step = amax / query_code_max(dim);
        EXPECT_NEAR(m.result.scale, step, step * 1e-5);
        for (size_t d = 0; d < dim; ++d)
          EXPECT_NEAR(m.result.scale * m.codes[d], ref[d], step * 0.5 + amax * 1e-5)
              << "dim " << dim << " element " << d;
        EXPECT_NEAR(m.result.sum, sum, magnitude * 1e-5 + 1e-12);
      }
    }
  }
}

}  // namespace
}  // namespace pagedkv
