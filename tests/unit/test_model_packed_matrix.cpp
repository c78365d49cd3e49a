// The packed matmul is bit-identical to llama2.c's scalar matmul (one float sum per output, in
// input order) for every shape, batch size, stride, thread count and ISA build.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/model/quant/packed_matrix.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

// llama2.c's matmul: W (d, n) @ x (n,) -> out (d,).
void scalar_matmul(float* out, const float* x, const float* w, int n, int d) {
  for (int i = 0; i < d; i++) {
    float val = 0.0f;
    for (int j = 0; j < n; j++) val += w[static_cast<size_t>(i) * n + j] * x[j];
    out[i] = val;
  }
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(gen);
  return v;
}

std::vector<KernelIsa> isas() {
  std::vector<KernelIsa> out = {KernelIsa::kScalar};
  if (has_avx2(best_available_isa())) out.push_back(KernelIsa::kAvx2);
  if (best_available_isa() == KernelIsa::kAvx512) out.push_back(KernelIsa::kAvx512);
  return out;
}

TEST(PackedMatrix, BitIdenticalToScalarMatmul) {
  for (int threads : {1, 2}) {
    testing::ScopedKernelThreads scoped(threads);
    for (auto [rows, cols] :
         {std::pair{1, 1}, {7, 3}, {8, 64}, {13, 17}, {64, 64}, {100, 48}, {344, 64}, {512, 64}, {1000, 300}}) {
      const auto w = random_floats(static_cast<size_t>(rows) * cols, 1);
      const PackedMatrix packed(w.data(), rows, cols);
      EXPECT_EQ(packed.rows(), rows);
      EXPECT_EQ(packed.cols(), cols);
      for (int tokens : {1, 2, 3, 4, 5, 9, 17, 40}) {
        // Strided rows, as the runner uses them: x rows cols + 3 apart, y rows rows + 5 apart.
        const size_t xs = static_cast<size_t>(cols) + 3, ys = static_cast<size_t>(rows) + 5;
        const auto x = random_floats(xs * tokens, 2);
        std::vector<float> want(ys * tokens, -7.0f);
        for (int t = 0; t < tokens; ++t) scalar_matmul(want.data() + t * ys, x.data() + t * xs, w.data(), cols, rows);
        for (KernelIsa isa : isas()) {
          std::vector<float> got(ys * tokens, -7.0f);  // padding between rows must stay untouched
          packed.multiply(x.data(), xs, tokens, got.data(), ys, isa);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << rows << "x" << cols << " tokens " << tokens << " " << isa_name(isa) << " threads " << threads;
        }
      }
    }
  }
}

TEST(PackedMatrix, StackedPartsActAsOneMatrix) {
  const auto a = random_floats(5 * 12, 3), b = random_floats(9 * 12, 4), c = random_floats(2 * 12, 5);
  std::vector<float> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  const PackedMatrix stacked({a.data(), b.data(), c.data()}, {5, 9, 2}, 12);
  const PackedMatrix whole(all.data(), 16, 12);
  const auto x = random_floats(12 * 6, 6);
  std::vector<float> y1(16 * 6), y2(16 * 6);
  stacked.multiply(x.data(), 12, 6, y1.data(), 16);
  whole.multiply(x.data(), 12, 6, y2.data(), 16);
  EXPECT_EQ(y1, y2);
  EXPECT_THROW(PackedMatrix({a.data()}, {5, 9}, 12), UsageError);
  EXPECT_THROW(PackedMatrix(a.data(), 0, 12), UsageError);
  EXPECT_THROW(PackedMatrix(a.data(), 5, 0), UsageError);
}

}  // namespace
}  // namespace pagedkv
