// QuantizedMatrix's BF16 pair build (Bf16Products::kPairs: vdpbf16ps on activations rounded to
// BF16), against a reference written from the instruction's definition: per pair of columns,
// acc = fma(w_odd, x_odd, acc) then fma(w_even, x_even, acc), BF16 subnormals read as zero,
// subnormal sums flushed to zero. PAGEDKV_BF16_PAIRS=1 selects the build wherever AVX512-BF16 runs;
// elsewhere the tests skip.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/quant/quantized_matrix.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {
namespace {

// Before anything asks for bf16_products (fixed at its first call).
const bool kPairsRequested = [] { return setenv("PAGEDKV_BF16_PAIRS", "1", 1) == 0; }();

bool pairs_run() { return kPairsRequested && bf16_products() == Bf16Products::kPairs; }

constexpr const char* kSkip = "no AVX512-BF16 (with AVX-512 VNNI) on this CPU: the pair build does not run here";

// A BF16 value as vdpbf16ps reads it: subnormals as zero of the same sign.
float read_bf16(uint16_t b) {
  return (b & 0x7F80u) == 0 ? std::bit_cast<float>(static_cast<uint32_t>(b & 0x8000u) << 16) : bf16_to_f32(b);
}

float flush_subnormal(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0x80000000u) : v;
}

// One output: row w (cols BF16 values) against the f32 activations x.
float reference_dot(const uint16_t* w, const float* x, int cols) {
  float acc = 0.0f;
  for (int k = 0; k < cols; k += 2) {
    const bool odd_exists = k + 1 < cols;
    const float w_odd = odd_exists ? read_bf16(w[k + 1]) : 0.0f;
    const float x_odd = odd_exists ? read_bf16(f32_to_bf16(x[k + 1])) : 0.0f;
    acc = flush_subnormal(std::fma(w_odd, x_odd, acc));
    acc = flush_subnormal(std::fma(read_bf16(w[k]), read_bf16(f32_to_bf16(x[k])), acc));
  }
  return acc;
}

struct Bf16Weights {
  int rows, cols;
  std::vector<uint16_t> bits;
  WeightTensor view() const { return {TensorType::kBF16, bits.data(), rows, cols}; }
};

Bf16Weights random_weights(int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  Bf16Weights w{rows, cols, std::vector<uint16_t>(static_cast<size_t>(rows) * static_cast<size_t>(cols))};
  for (uint16_t& b : w.bits) b = f32_to_bf16(dist(rng));
  return w;
}

// Every output against the reference, bit for bit (NaN as NaN), and the padding between rows of y
// untouched.
void expect_reference(const Bf16Weights& w, const std::vector<float>& x, size_t x_stride, int tokens,
                      const std::vector<float>& y, size_t y_stride, const char* what) {
  for (int t = 0; t < tokens; ++t)
    for (size_t r = 0; r < y_stride; ++r) {
      const float got = y[static_cast<size_t>(t) * y_stride + r];
      if (r >= static_cast<size_t>(w.rows)) {
        ASSERT_EQ(got, -1.0f) << what << ": padding after the rows written, token " << t;
        continue;
      }
      const float want = reference_dot(w.bits.data() + r * static_cast<size_t>(w.cols),
                                       x.data() + static_cast<size_t>(t) * x_stride, w.cols);
      if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << what << ", token " << t << " row " << r;
      else
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << what << ", token " << t << " row " << r << ": " << got << " vs " << want;
    }
}

TEST(Bf16Pairs, TheChoiceFollowsTheIsa) {
  if (!pairs_run()) GTEST_SKIP() << kSkip;
  EXPECT_EQ(bf16_products(KernelIsa::kAvx512), Bf16Products::kPairs);
  EXPECT_EQ(bf16_products(KernelIsa::kAvx2), Bf16Products::kWidened);
  EXPECT_EQ(bf16_products(KernelIsa::kScalar), Bf16Products::kWidened);
}

// Decode-sized and prompt-sized batches (tiles of 4, 2 and 1 panels; partial groups; a prompt in
// blocks of tokens), odd and even column counts (the zero pad column), partial last panels: every
// output equals the reference, and every token what it gives alone.
TEST(Bf16Pairs, ProductsEqualTheInstructionsDefinition) {
  if (!pairs_run()) GTEST_SKIP() << kSkip;
  const int threads = kernel_threads();
  set_kernel_threads(1);
  for (const auto& [rows, cols] : {std::pair{37, 160}, std::pair{19, 35}, std::pair{70, 2061}}) {
    const Bf16Weights w = random_weights(rows, cols, static_cast<uint32_t>(rows + cols));
    const QuantizedMatrix m(w.view());
    for (int tokens : {1, 2, 3, 5, 8, 16, 17, 33, 150}) {
      std::mt19937 rng(static_cast<uint32_t>(tokens));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      const size_t x_stride = static_cast<size_t>(cols) + 3, y_stride = static_cast<size_t>(rows) + 2;
      std::vector<float> x(static_cast<size_t>(tokens) * x_stride);
      for (float& f : x) f = dist(rng);
      std::vector<float> y(static_cast<size_t>(tokens) * y_stride, -1.0f);
      m.multiply(x.data(), x_stride, tokens, y.data(), y_stride);
      const std::string what =
          std::to_string(rows) + " x " + std::to_string(cols) + ", " + std::to_string(tokens) + " tokens";
      expect_reference(w, x, x_stride, tokens, y, y_stride, what.c_str());
      if (tokens > 1) {
        const int t = tokens / 2;
        std::vector<float> alone(y_stride, -1.0f);
        m.multiply(x.data() + static_cast<size_t>(t) * x_stride, x_stride, 1, alone.data(), y_stride);
        for (int r = 0; r < rows; ++r)
          ASSERT_EQ(std::bit_cast<uint32_t>(alone[static_cast<size_t>(r)]),
                    std::bit_cast<uint32_t>(y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)]))
              << what << ": token " << t << " alone, row " << r;
      }
    }
  }
  set_kernel_threads(threads);
}

// Rows with one non-zero weight each, set to BF16's extremes (largest finite of either sign,
// smallest normal, a subnormal, -0, one, infinity, NaN), against activations from zero to 3e5 and
// one below BF16's smallest normal: each output is one product (or NaN, infinity, a flushed or
// zero-read subnormal), so a build that reads a row, a column or a half of a pair in the wrong
// place, or rounds the activations otherwise, gets another value.
TEST(Bf16Pairs, ExtremeWeightsLandInTheirRowAndColumn) {
  if (!pairs_run()) GTEST_SKIP() << kSkip;
  const int rows = 19, cols = 35;
  const std::vector<uint16_t> extremes{0x7F7F, 0xFF7F, 0x0080, 0x0001, 0x8000, 0x3F80, 0x7F80, 0x7FC0, 0xC0A0};
  Bf16Weights w{rows, cols, std::vector<uint16_t>(static_cast<size_t>(rows) * cols)};
  for (int r = 0; r < rows; ++r)
    w.bits[static_cast<size_t>(r) * cols + static_cast<size_t>((r * 7 + 3) % cols)] =
        extremes[static_cast<size_t>(r) % extremes.size()];
  const QuantizedMatrix m(w.view());
  for (int tokens : {1, 2, 3, 5, 16, 17, 33}) {
    const size_t x_stride = cols + 1, y_stride = rows + 1;
    std::vector<float> x(static_cast<size_t>(tokens) * x_stride);
    for (int t = 0; t < tokens; ++t)
      for (int k = 0; k < cols; ++k)
        x[static_cast<size_t>(t) * x_stride + static_cast<size_t>(k)] =
            k % 9 == 4 ? 1e-39f
                       : static_cast<float>((k * 5 + t * 3) % 11 - 5) * (k % 4 == 1 ? 3e5f : 0.37f) +
                             0.01f * static_cast<float>(k);
    std::vector<float> y(static_cast<size_t>(tokens) * y_stride, -1.0f);
    m.multiply(x.data(), x_stride, tokens, y.data(), y_stride);
    expect_reference(w, x, x_stride, tokens, y, y_stride, ("extremes, " + std::to_string(tokens) + " tokens").c_str());
  }
}

// A matrix large enough to be split over the threads (and, at 40 tokens, a prompt's blocks of tokens
// over many panels): 1 and 5 threads give the same outputs, and the reference's.
TEST(Bf16Pairs, ChunksOverThreadsGiveTheOneThreadResult) {
  if (!pairs_run()) GTEST_SKIP() << kSkip;
  const int threads = kernel_threads();
  const int rows = 1000, cols = 2048;
  const Bf16Weights w = random_weights(rows, cols, 5);
  const QuantizedMatrix m(w.view());
  for (int tokens : {1, 3, 9, 40}) {
    std::mt19937 rng(static_cast<uint32_t>(tokens));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(tokens) * cols);
    for (float& f : x) f = dist(rng);
    std::vector<std::vector<float>> results;
    for (int n : {1, 5}) {
      set_kernel_threads(n);
      std::vector<float>& y = results.emplace_back(static_cast<size_t>(tokens) * rows, -1.0f);
      m.multiply(x.data(), cols, tokens, y.data(), rows);
    }
    ASSERT_EQ(results[1], results[0]) << tokens << " tokens: 5 threads differ";
    // The first and last rows and some between, against the reference.
    for (int t = 0; t < tokens; ++t)
      for (int r : {0, 511, 512, 513, 999}) {
        const float want = reference_dot(w.bits.data() + static_cast<size_t>(r) * cols,
                                         x.data() + static_cast<size_t>(t) * cols, cols);
        ASSERT_EQ(std::bit_cast<uint32_t>(results[0][static_cast<size_t>(t) * rows + static_cast<size_t>(r)]),
                  std::bit_cast<uint32_t>(want))
            << tokens << " tokens: token " << t << " row " << r;
      }
  }
  set_kernel_threads(threads);
}

}  // namespace
}  // namespace pagedkv
