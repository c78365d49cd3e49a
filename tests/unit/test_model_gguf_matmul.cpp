// QuantizedMatrix (F16, BF16, Q8_0, Q4_0 and the block formats of block_formats.h, weights read in
// place) against a float64 reference of the same arithmetic, every available ISA against the scalar
// twin, the activation quantizers, and LinearLayer's mixing of parts.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/format/block_formats.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/quant/linear_layer.h"
#include "pagedkv/model/quant/quantized_matrix.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {
namespace {

// BF16 is held here to the widened contract of every build (bf16_products: each weight widened to
// f32, f32 activations), set before anything asks; test_model_bf16_pairs.cpp tests the pair build.
const bool kWidenedBf16 = [] { return setenv("PAGEDKV_BF16_PAIRS", "0", 1) == 0; }();

struct Weights {
  TensorType type;
  int rows, cols;
  std::vector<std::byte> bytes;
  WeightTensor view() const { return {type, bytes.data(), rows, cols}; }
};

Weights make_weights(TensorType type, int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> v(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  for (float& f : v) f = dist(rng);
  GgufWriter w;
  w.add_tensor_f32("w", type, {cols, rows}, v);
  const auto file = w.bytes();
  GgufFile f(file, "w");
  const GgufTensor& t = f.tensors()[0];
  return {type, rows, cols, {t.data, t.data + t.bytes}};
}

// What the product must be: for Q8_0/Q4_0 the activations quantized to Q8_0 first, every block
// term summed in double; for F16/BF16 the widened weights times the f32 activations.
double reference_dot(const Weights& w, int r, const float* x) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  dequantize_row(w.type, w.view().row(r), row);
  if (w.type == TensorType::kF16 || w.type == TensorType::kBF16) {
    double s = 0;
    for (int j = 0; j < w.cols; ++j) s += static_cast<double>(row[static_cast<size_t>(j)]) * x[j];
    return s;
  }
  std::vector<BlockQ8_0> xq(static_cast<size_t>(w.cols / kQuantBlock));
  quantize_row_q8_0({x, static_cast<size_t>(w.cols)}, xq.data());
  std::vector<float> xd(static_cast<size_t>(w.cols));
  dequantize_row(TensorType::kQ8_0, xq.data(), xd);
  double s = 0;
  for (int j = 0; j < w.cols; ++j) s += static_cast<double>(row[static_cast<size_t>(j)]) * xd[static_cast<size_t>(j)];
  return s;
}

// The SIMD builds this CPU runs (AVX2, AVX-512), each tested against the scalar twin.
std::vector<KernelIsa> simd_isas() {
  std::vector<KernelIsa> isas;
  if (has_avx2(best_available_isa())) isas.push_back(KernelIsa::kAvx2);
  if (best_available_isa() == KernelIsa::kAvx512) isas.push_back(KernelIsa::kAvx512);
  return isas;
}

class QuantizedMatrixTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(QuantizedMatrixTest, EveryIsaMatchesTheReferenceAndTheScalarTwin) {
  const TensorType type = GetParam();
  const int rows = 37, cols = 160, tokens = 5;  // a partial row group; 16-wide SIMD steps plus a tail for F16
  const Weights w = make_weights(type, rows, cols, 3);
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t x_stride = cols + 3, y_stride = rows + 2;
  std::vector<float> x(tokens * x_stride);
  for (float& f : x) f = dist(rng);
  const QuantizedMatrix m(w.view());
  std::vector<float> scalar(tokens * y_stride, -1.0f);
  m.multiply(x.data(), x_stride, tokens, scalar.data(), y_stride, KernelIsa::kScalar);
  for (int t = 0; t < tokens; ++t)
    for (int r = 0; r < rows; ++r) {
      const double ref = reference_dot(w, r, x.data() + static_cast<size_t>(t) * x_stride);
      EXPECT_NEAR(scalar[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)], ref, 1e-4 * (1 + std::fabs(ref)));
    }
  EXPECT_EQ(scalar[y_stride - 1], -1.0f) << "padding between rows of y was written";
  for (KernelIsa isa : simd_isas()) {
    std::vector<float> simd(tokens * y_stride, -1.0f);
    m.multiply(x.data(), x_stride, tokens, simd.data(), y_stride, isa);
    for (size_t i = 0; i < simd.size(); ++i)
      EXPECT_NEAR(simd[i], scalar[i], 1e-5 * (1 + std::fabs(scalar[i]))) << isa_name(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizedMatrixTest,
                         ::testing::Values(TensorType::kF16, TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                           return tensor_type_name(param_info.param);
                         });

// The register-blocked SIMD builds against the scalar twin: every type, row counts that leave
// partial row tiles, panels of 16 (the AVX-512 build's repacked rows, padded) and row groups,
// column counts with an odd number of Q8_0 blocks or a partial AVX2 step (F16/BF16), 1..40 tokens
// (every token-tile remainder, and the AVX-512 build's 4-, 2- and 1-panel tiles), strided x and y.
// The bound is float rounding of differently ordered (or fused) sums.
TEST(QuantizedMatrix, BatchedSimdBuildsMatchTheScalarTwin) {
  const std::vector<KernelIsa> isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no SIMD build on this CPU";
  struct Shape {
    int rows, cols;
  };
  for (TensorType type : {TensorType::kF16, TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0}) {
    const bool quantized = type == TensorType::kQ8_0 || type == TensorType::kQ4_0;
    // 67 rows: four full panels of 16 (one AVX-512 row group) and a partial fifth.
    const std::vector<Shape> shapes = quantized ? std::vector<Shape>{{1, 32}, {7, 96}, {21, 256}, {67, 64}}
                                                : std::vector<Shape>{{1, 17}, {7, 40}, {21, 256}, {67, 33}};
    for (const Shape& shape : shapes) {
      const Weights w = make_weights(type, shape.rows, shape.cols, static_cast<uint32_t>(shape.rows * 31 + shape.cols));
      const QuantizedMatrix m(w.view());
      std::mt19937 rng(static_cast<uint32_t>(shape.cols));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      const size_t x_stride = static_cast<size_t>(shape.cols) + 5, y_stride = static_cast<size_t>(shape.rows) + 3;
      std::vector<float> x(40 * x_stride);
      for (float& f : x) f = dist(rng);
      // |w| . |x| per row and token bounds the rounding of either order of summation.
      std::vector<float> w_abs(static_cast<size_t>(shape.rows) * static_cast<size_t>(shape.cols));
      for (int r = 0; r < shape.rows; ++r)
        dequantize_row(type, w.view().row(r),
                       std::span(w_abs).subspan(static_cast<size_t>(r * shape.cols), static_cast<size_t>(shape.cols)));
      for (float& f : w_abs) f = std::fabs(f);
      for (int tokens = 1; tokens <= 40; ++tokens) {
        std::vector<float> scalar(static_cast<size_t>(tokens) * y_stride, -1.0f);
        m.multiply(x.data(), x_stride, tokens, scalar.data(), y_stride, KernelIsa::kScalar);
        for (KernelIsa isa : isas) {
          std::vector<float> simd(scalar.size(), -1.0f);
          m.multiply(x.data(), x_stride, tokens, simd.data(), y_stride, isa);
          for (int t = 0; t < tokens; ++t) {
            for (int r = 0; r < shape.rows; ++r) {
              double magnitude = 0;
              for (int j = 0; j < shape.cols; ++j)
                magnitude += static_cast<double>(w_abs[static_cast<size_t>(r * shape.cols + j)]) *
                             std::fabs(x[static_cast<size_t>(t) * x_stride + static_cast<size_t>(j)]) *
                             (quantized ? 1.01 : 1.0);
              const size_t i = static_cast<size_t>(t) * y_stride + static_cast<size_t>(r);
              ASSERT_NEAR(simd[i], scalar[i], 1e-5 * (1 + magnitude))
                  << tensor_type_name(type) << " " << isa_name(isa) << " " << shape.rows << "x" << shape.cols
                  << " tokens " << tokens << " t " << t << " r " << r;
            }
            for (size_t pad = static_cast<size_t>(shape.rows); pad < y_stride; ++pad)
              ASSERT_EQ(simd[static_cast<size_t>(t) * y_stride + pad], -1.0f) << "padding of y written";
          }
        }
      }
    }
  }
}

TEST(QuantizedMatrix, ExtremeBlocksStayExact) {
  // -128 weights and full-scale activations: the SIMD sign trick must not saturate.
  Weights w{TensorType::kQ8_0, 1, 32, std::vector<std::byte>(sizeof(BlockQ8_0))};
  BlockQ8_0 b{};
  b.d = f32_to_f16(1.0f);
  for (int j = 0; j < 32; ++j) b.q[j] = -128;
  std::memcpy(w.bytes.data(), &b, sizeof b);
  std::vector<float> x(32, -127.0f);
  float y_scalar = 0;
  QuantizedMatrix m(w.view());
  m.multiply(x.data(), 32, 1, &y_scalar, 1, KernelIsa::kScalar);
  EXPECT_EQ(y_scalar, 32.0f * 128.0f * 127.0f);
  for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (!has_avx2(best_available_isa()) || (isa == KernelIsa::kAvx512 && best_available_isa() != isa)) continue;
    std::vector<float> xs(5 * 32, -127.0f), ys(5, 0.0f);  // a full token tile and a remainder
    m.multiply(xs.data(), 32, 5, ys.data(), 1, isa);
    for (float v : ys) EXPECT_EQ(v, y_scalar) << isa_name(isa);
  }
}

// Each SIMD build quantizes the activations itself; its codes must be the scalar twin's, ties
// rounded to even as nearbyint does. Row r of 32 x 32 weights is 1 in column r and 0 elsewhere
// (Q8_0: d = 1; Q4_0: level 9, offset 8), so output r is d_x times activation code r, one exact
// product in every build. Token t's activations: +-127 in column 0 (d_x = 1, so codes are the values
// rounded) and halves elsewhere, every one a tie; 1 token (the few-token tiles) and 9 (prompts).
TEST(QuantizedMatrix, ActivationCodesRoundTiesAsTheScalarTwin) {
  const std::vector<KernelIsa> isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no SIMD build on this CPU";
  constexpr int kSize = 32;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0}) {
    Weights w{type, kSize, kSize, {}};
    for (int r = 0; r < kSize; ++r) {
      if (type == TensorType::kQ8_0) {
        BlockQ8_0 b{};
        b.d = f32_to_f16(1.0f);
        b.q[r] = 1;
        const auto* p = reinterpret_cast<const std::byte*>(&b);
        w.bytes.insert(w.bytes.end(), p, p + sizeof b);
      } else {
        BlockQ4_0 b{};
        b.d = f32_to_f16(1.0f);
        for (int j = 0; j < kSize / 2; ++j) {
          const int lo = j == r ? 9 : 8, hi = j + kSize / 2 == r ? 9 : 8;
          b.q[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
        const auto* p = reinterpret_cast<const std::byte*>(&b);
        w.bytes.insert(w.bytes.end(), p, p + sizeof b);
      }
    }
    const QuantizedMatrix m(w.view());
    for (int tokens : {1, 9}) {
      std::vector<float> x(static_cast<size_t>(tokens) * kSize);
      for (int t = 0; t < tokens; ++t) {
        x[static_cast<size_t>(t) * kSize] = t % 2 == 0 ? 127.0f : -127.0f;
        for (int j = 1; j < kSize; ++j)
          x[static_cast<size_t>(t * kSize + j)] = static_cast<float>(j - 16 + 3 * t) + 0.5f;
      }
      std::vector<float> scalar(x.size()), simd(x.size());
      m.multiply(x.data(), kSize, tokens, scalar.data(), kSize, KernelIsa::kScalar);
      EXPECT_EQ(scalar[1], -14.0f);  // -14.5 to even
      EXPECT_EQ(scalar[2], -14.0f);  // -13.5 to even
      for (KernelIsa isa : isas) {
        m.multiply(x.data(), kSize, tokens, simd.data(), kSize, isa);
        EXPECT_EQ(simd, scalar) << tensor_type_name(type) << " " << isa_name(isa) << ", " << tokens << " tokens";
      }
    }
  }
}

// The same for the super-block types, whose SIMD builds quantize to Q8_K themselves and equal the
// scalar twin bit for bit: activations whose value of largest magnitude is -127 (iscale 1, so
// the codes are the values rounded) and halves elsewhere, every one a tie; a code rounded the
// other way changes the random rows' sums.
TEST(QuantizedMatrix, SuperBlockActivationCodesRoundTiesAsTheScalarTwin) {
  const std::vector<KernelIsa> isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no SIMD build on this CPU";
  constexpr int kRows = 20, kCols = 512;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kIQ4_XS}) {
    const Weights w = make_weights(type, kRows, kCols, 7);
    const QuantizedMatrix m(w.view());
    for (int tokens : {1, 9}) {
      std::vector<float> x(static_cast<size_t>(tokens) * kCols);
      for (int t = 0; t < tokens; ++t)
        for (int j = 0; j < kCols; ++j)
          x[static_cast<size_t>(t * kCols + j)] =
              j % 256 == 5 ? -127.0f : static_cast<float>((j * 7 + 3 * t) % 200 - 100) + 0.5f;
      std::vector<float> scalar(static_cast<size_t>(tokens) * kRows), simd(scalar.size());
      m.multiply(x.data(), kCols, tokens, scalar.data(), kRows, KernelIsa::kScalar);
      for (KernelIsa isa : isas) {
        m.multiply(x.data(), kCols, tokens, simd.data(), kRows, isa);
        EXPECT_EQ(simd, scalar) << tensor_type_name(type) << " " << isa_name(isa) << ", " << tokens << " tokens";
      }
    }
  }
}

// F16 / BF16 rows with one non-zero weight each, in a different column per row, set to the type's
// extremes (largest finite of either sign, smallest normal, smallest subnormal, -0, infinity,
// NaN): every output is that weight times one activation, exact in every build (no other term,
// no rounding order), so each build must equal the scalar twin bit for bit; a build that reads a
// panel's rows, columns or column pairs in the wrong place gets another weight or activation.
// Odd row and column counts leave partial panels and (BF16) a zero column pairing the last one.
TEST(QuantizedMatrix, ExtremeFloatWeightsLandInTheirRowAndColumn) {
  const int rows = 19, cols = 35;
  for (TensorType type : {TensorType::kF16, TensorType::kBF16}) {
    const std::vector<uint16_t> extremes =
        type == TensorType::kF16
            ? std::vector<uint16_t>{0x7BFF, 0xFBFF, 0x0400, 0x0001, 0x8000, 0x3C00, 0x7C00, 0x7E00, 0xC500}
            : std::vector<uint16_t>{0x7F7F, 0xFF7F, 0x0080, 0x0001, 0x8000, 0x3F80, 0x7F80, 0x7FC0, 0xC0A0};
    Weights w{type, rows, cols, std::vector<std::byte>(static_cast<size_t>(rows) * cols * 2)};
    auto* bits = reinterpret_cast<uint16_t*>(w.bytes.data());
    for (int r = 0; r < rows; ++r)
      bits[static_cast<size_t>(r) * cols + static_cast<size_t>((r * 7 + 3) % cols)] =
          extremes[static_cast<size_t>(r) % extremes.size()];
    const QuantizedMatrix m(w.view());
    for (int tokens : {1, 2, 3, 5, 16, 17, 33}) {
      const size_t x_stride = cols + 1, y_stride = rows + 1;
      std::vector<float> x(static_cast<size_t>(tokens) * x_stride);
      for (int t = 0; t < tokens; ++t)
        for (int k = 0; k < cols; ++k)  // distinct per column and token, some zero, some large
          x[static_cast<size_t>(t) * x_stride + static_cast<size_t>(k)] =
              static_cast<float>((k * 5 + t * 3) % 11 - 5) * (k % 4 == 1 ? 3e5f : 0.37f) +
              0.01f * static_cast<float>(k);
      std::vector<float> scalar(static_cast<size_t>(tokens) * y_stride, -1.0f);
      m.multiply(x.data(), x_stride, tokens, scalar.data(), y_stride, KernelIsa::kScalar);
      for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
        if (!has_avx2(best_available_isa()) || (isa == KernelIsa::kAvx512 && best_available_isa() != isa)) continue;
        std::vector<float> simd(scalar.size(), -1.0f);
        m.multiply(x.data(), x_stride, tokens, simd.data(), y_stride, isa);
        for (size_t i = 0; i < simd.size(); ++i) {
          if (std::isnan(scalar[i])) {
            EXPECT_TRUE(std::isnan(simd[i]))
                << tensor_type_name(type) << " " << isa_name(isa) << " tokens " << tokens << " output " << i;
          } else {
            EXPECT_EQ(std::bit_cast<uint32_t>(simd[i]), std::bit_cast<uint32_t>(scalar[i]))
                << tensor_type_name(type) << " " << isa_name(isa) << " tokens " << tokens << " output " << i << ": "
                << simd[i] << " vs " << scalar[i];
          }
        }
      }
    }
  }
}

// A prompt-sized batch, which the builds cut in blocks and column slices, carrying the sums through
// y from slice to slice: F16 / BF16 panels in blocks of 32 panels x 128 (AVX-512) or 96 (AVX2)
// tokens and slices of 1,024 columns; AVX2's Q8_0 rows transposed 16 rows and 1,024 columns at a
// time (its Q4_0 panels take a panel's columns at once). A partial last group, block and slice (an odd column count:
// the zero pad column), and (one thread, so that one call holds them all) more rows than one block with a partial last
// panel: every output against the scalar twin, every token bit for bit what it gives alone (each
// output is one FMA chain over the columns or blocks, whatever tile, block or slice it runs in),
// and the AVX2 build bit for bit the AVX-512 build where both run.
TEST(QuantizedMatrix, PromptBatchesMatchTheScalarTwinAndTheTokenAlone) {
  const std::vector<KernelIsa> isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no SIMD build on this CPU";
  const int threads = kernel_threads();
  set_kernel_threads(1);
  for (TensorType type : {TensorType::kF16, TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0}) {
    const bool quantized = type == TensorType::kQ8_0 || type == TensorType::kQ4_0;
    for (const auto [rows, cols, tokens] :
         {std::array{33, 2048, 100}, std::array{17, 4096, 37}, std::array{531, quantized ? 2080 : 2061, 147}}) {
      const Weights w = make_weights(type, rows, cols, static_cast<uint32_t>(cols + tokens));
      const QuantizedMatrix m(w.view());
      std::mt19937 rng(static_cast<uint32_t>(tokens));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      const size_t x_stride = static_cast<size_t>(cols) + 1, y_stride = static_cast<size_t>(rows) + 2;
      std::vector<float> x(static_cast<size_t>(tokens) * x_stride);
      for (float& f : x) f = dist(rng);
      std::vector<float> scalar(static_cast<size_t>(tokens) * y_stride, -1.0f), first_build;
      m.multiply(x.data(), x_stride, tokens, scalar.data(), y_stride, KernelIsa::kScalar);
      std::vector<float> dense(static_cast<size_t>(rows) * static_cast<size_t>(cols));
      for (int r = 0; r < rows; ++r)
        dequantize_row(type, w.view().row(r), std::span(dense).subspan(static_cast<size_t>(r) * cols, cols));
      for (KernelIsa isa : isas) {
        std::vector<float> simd(scalar.size(), -1.0f);
        m.multiply(x.data(), x_stride, tokens, simd.data(), y_stride, isa);
        if (first_build.empty()) first_build = simd;
        ASSERT_EQ(simd, first_build) << tensor_type_name(type) << " " << cols << " columns: " << isa_name(isa)
                                     << " differs from " << isa_name(isas[0]);
        for (int t = 0; t < tokens; ++t) {
          std::vector<float> alone(static_cast<size_t>(rows));
          m.multiply(x.data() + static_cast<size_t>(t) * x_stride, x_stride, 1, alone.data(), 0, isa);
          for (int r = 0; r < rows; ++r) {
            const size_t i = static_cast<size_t>(t) * y_stride + static_cast<size_t>(r);
            double magnitude = 0;  // |w| . |x| bounds the rounding of either order of summation
            for (int j = 0; j < cols; ++j)
              magnitude +=
                  std::fabs(static_cast<double>(dense[static_cast<size_t>(r) * cols + static_cast<size_t>(j)]) *
                            x[static_cast<size_t>(t) * x_stride + static_cast<size_t>(j)]) *
                  (quantized ? 1.01 : 1.0);
            ASSERT_NEAR(simd[i], scalar[i], 1e-5 * (1 + magnitude))
                << tensor_type_name(type) << " " << isa_name(isa) << " " << cols << " columns, token " << t << " row "
                << r;
            ASSERT_EQ(simd[i], alone[static_cast<size_t>(r)]) << tensor_type_name(type) << " " << isa_name(isa) << " "
                                                              << cols << " columns, token " << t << " row " << r;
          }
          for (size_t pad = static_cast<size_t>(rows); pad < y_stride; ++pad)
            ASSERT_EQ(simd[static_cast<size_t>(t) * y_stride + pad], -1.0f) << "padding of y written";
        }
      }
    }
  }
  set_kernel_threads(threads);
}

// Weights in a block format: random bytes (every bit pattern is a valid block) with sane fp16
// scales, so that every level, scale and min of the format is exercised.
Weights make_block_weights(TensorType type, int rows, int cols, uint32_t seed) {
  const auto traits = *tensor_type_traits(static_cast<uint32_t>(type));
  const size_t block_bytes = static_cast<size_t>(traits.block_bytes);
  const size_t blocks = static_cast<size_t>(rows) * static_cast<size_t>(cols / traits.block_elements);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.01f);
  Weights w{type, rows, cols, std::vector<std::byte>(blocks * block_bytes)};
  for (std::byte& b : w.bytes) b = static_cast<std::byte>(rng() & 0xFF);
  // Byte offsets of the fp16 scale fields: d, then m / dmin where the format has one.
  std::vector<size_t> fields;
  switch (type) {
    case TensorType::kQ4_1:
    case TensorType::kQ5_1:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
      fields = {0, 2};
      break;
    case TensorType::kQ2_K:
      fields = {80, 82};
      break;
    case TensorType::kQ3_K:
      fields = {108};
      break;
    case TensorType::kQ6_K:
      fields = {208};
      break;
    default:
      fields = {0};
      break;  // Q5_0, IQ4_NL, IQ4_XS
  }
  for (size_t k = 0; k < blocks; ++k)
    for (size_t f : fields) {
      const float v =
          scale(rng) *
          ((type == TensorType::kQ4_1 || type == TensorType::kQ5_1) && f == 2 && (rng() & 1) ? -1.0f : 1.0f);
      const uint16_t h = f32_to_f16(v);
      std::memcpy(w.bytes.data() + k * block_bytes + f, &h, 2);
    }
  return w;
}

// Decode-sized calls (up to 8 tokens) split a matrix's row groups into chunks that the threads
// claim in turn; prompts give each thread one share. Either way every row is computed once, by the
// same tile as on one thread: bit for bit the one-thread result, every row written, the padding of
// y untouched. Sizes past the quarter megabyte that makes a call parallel, with a partial last
// group; 5 threads, so that chunks and shares do not divide the groups evenly.
TEST(QuantizedMatrix, ChunksOverThreadsGiveTheOneThreadResult) {
  const int threads = kernel_threads();
  for (TensorType type : {TensorType::kF16, TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_K, TensorType::kQ6_K,
                          TensorType::kIQ4_XS, TensorType::kQ5_0}) {
    const bool block_format = type != TensorType::kF16 && type != TensorType::kQ8_0 && type != TensorType::kQ4_0;
    const int rows = 1000, cols = 2048;
    const Weights w = block_format ? make_block_weights(type, rows, cols, 11) : make_weights(type, rows, cols, 11);
    const QuantizedMatrix m(w.view());
    ASSERT_GE(m.bytes(), size_t{256} << 10);
    for (int tokens : {1, 3, 8, 9}) {
      std::mt19937 rng(static_cast<uint32_t>(tokens));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(tokens) * cols);
      for (float& f : x) f = dist(rng);
      const size_t y_stride = static_cast<size_t>(rows) + 3;
      std::vector<std::vector<float>> results;
      for (int n : {1, 5}) {
        set_kernel_threads(n);
        std::vector<float>& y = results.emplace_back(static_cast<size_t>(tokens) * y_stride, -1.0f);
        m.multiply(x.data(), static_cast<size_t>(cols), tokens, y.data(), y_stride);
      }
      ASSERT_EQ(results[1], results[0]) << tensor_type_name(type) << ", " << tokens << " tokens: 5 threads differ";
      for (int t = 0; t < tokens; ++t)
        for (size_t r = 0; r < y_stride; ++r)
          ASSERT_EQ(results[0][static_cast<size_t>(t) * y_stride + r] == -1.0f, r >= static_cast<size_t>(rows))
              << tensor_type_name(type) << ", " << tokens << " tokens: token " << t << " row " << r;
    }
  }
  set_kernel_threads(threads);
}

// Several products in one parallel region (the experts of a mixture of experts): each equals its
// own multiply() bit for bit, on every build and with 1 or 5 threads, whether its chunks run beside
// other matrices' or it is too small to split at all (the panel, row and block paths, 1 to 9 tokens).
TEST(QuantizedMatrix, ProductsInOneRegionEqualEachProductAlone) {
  const int threads = kernel_threads();
  std::vector<KernelIsa> isas{KernelIsa::kScalar};
  for (KernelIsa isa : simd_isas()) isas.push_back(isa);
  struct Case {
    TensorType type;
    int rows;
  };
  const std::vector<Case> cases{{TensorType::kF16, 1000},  {TensorType::kQ8_0, 40},  {TensorType::kQ4_0, 1000},
                                {TensorType::kQ4_K, 520},  {TensorType::kQ6_K, 24},  {TensorType::kIQ4_XS, 1000},
                                {TensorType::kQ5_0, 1000}, {TensorType::kQ8_0, 1000}};
  constexpr int kCols = 2048;
  std::vector<Weights> weights;
  uint32_t seed = 21;
  for (const Case& c : cases) {
    const bool block_format = c.type != TensorType::kF16 && c.type != TensorType::kQ8_0 && c.type != TensorType::kQ4_0;
    weights.push_back(block_format ? make_block_weights(c.type, c.rows, kCols, seed)
                                   : make_weights(c.type, c.rows, kCols, seed));
    ++seed;
  }
  std::vector<QuantizedMatrix> matrices;
  for (const Weights& w : weights) matrices.emplace_back(w.view());
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (KernelIsa isa : isas)
    for (int n : {1, 5}) {
      set_kernel_threads(n);
      std::vector<std::vector<float>> x, together, alone;
      std::vector<QuantizedMatrix::Prepared> prepared(matrices.size());
      std::vector<QuantizedMatrix::Product> products;
      for (size_t i = 0; i < matrices.size(); ++i) {
        const int tokens = 1 + static_cast<int>(i * 4 % 9);  // 1, 5, 9, 4, 8, 3, 7, 2
        const size_t y_stride = static_cast<size_t>(matrices[i].rows()) + 2;
        std::vector<float>& xi = x.emplace_back(static_cast<size_t>(tokens) * kCols);
        for (float& v : xi) v = dist(rng);
        together.emplace_back(static_cast<size_t>(tokens) * y_stride, -1.0f);
        alone.emplace_back(static_cast<size_t>(tokens) * y_stride, -1.0f);
        matrices[i].prepare(xi.data(), kCols, tokens, prepared[i], isa);
        matrices[i].multiply(prepared[i], alone[i].data(), y_stride);
        products.push_back({&matrices[i], &prepared[i], together[i].data(), y_stride});
      }
      QuantizedMatrix::multiply_all(products);
      for (size_t i = 0; i < matrices.size(); ++i)
        ASSERT_EQ(together[i], alone[i]) << tensor_type_name(matrices[i].type()) << ", " << matrices[i].rows()
                                         << " rows, isa " << static_cast<int>(isa) << ", " << n << " threads";
    }
  set_kernel_threads(threads);
  QuantizedMatrix::multiply_all({});  // nothing to do
}

// ggml's activation format of each block format (its vec_dot_type), stated here independently.
TensorType activation_format(TensorType weight) {
  switch (weight) {
    case TensorType::kQ5_0:
    case TensorType::kIQ4_NL:
      return TensorType::kQ8_0;
    case TensorType::kQ4_1:
    case TensorType::kQ5_1:
      return TensorType::kQ8_1;
    default:
      return TensorType::kQ8_K;
  }
}

// The product of a block-format row with x as ggml defines it: x quantized to the activation
// format, then the dequantized weights times the dequantized activations, in double. Q4_1 / Q5_1
// take the weight's m against the Q8_1 block's stored s (fp16 of d * sum q), as ggml does.
double reference_block_dot(const Weights& w, int r, const float* x) {
  const size_t n = static_cast<size_t>(w.cols);
  std::vector<float> row(n);
  dequantize_row(w.type, w.view().row(r), row);
  double s = 0;
  switch (activation_format(w.type)) {
    case TensorType::kQ8_0: {
      std::vector<BlockQ8_0> xq(n / 32);
      quantize_row_q8_0({x, n}, xq.data());
      for (size_t j = 0; j < n; ++j) s += static_cast<double>(row[j]) * f16_to_f32(xq[j / 32].d) * xq[j / 32].q[j % 32];
      break;
    }
    case TensorType::kQ8_1: {
      std::vector<BlockQ8_1> xq(n / 32);
      quantize_row_q8_1({x, n}, xq.data());
      std::vector<int8_t> level(32);
      for (size_t b = 0; b < n / 32; ++b) {
        const std::byte* block =
            static_cast<const std::byte*>(w.view().row(r)) + b * (w.type == TensorType::kQ4_1 ? 20 : 24);
        uint16_t dm[2];
        std::memcpy(dm, block, 4);
        for (size_t j = 0; j < 32; ++j) {
          const double wd = static_cast<double>(row[b * 32 + j]) - f16_to_f32(dm[1]);  // d * level
          s += wd * f16_to_f32(xq[b].d) * xq[b].qs[j];
        }
        s += static_cast<double>(f16_to_f32(dm[1])) * f16_to_f32(xq[b].s);
      }
      break;
    }
    default: {
      std::vector<BlockQ8_K> xq(n / 256);
      quantize_row_q8_k({x, n}, xq.data());
      for (size_t j = 0; j < n; ++j) s += static_cast<double>(row[j]) * xq[j / 256].d * xq[j / 256].qs[j % 256];
      break;
    }
  }
  return s;
}

class BlockFormatTest : public ::testing::TestWithParam<TensorType> {};

// Every build against the float64 reference (bounded by float rounding of the block sums), and
// the SIMD builds against the scalar twin, bit for bit; odd row counts, a tile of 8 tokens and a
// remainder, strided x / y.
TEST_P(BlockFormatTest, EveryIsaMatchesTheReference) {
  const TensorType type = GetParam();
  // Legacy 32-value blocks: 19 per row, so the SIMD builds' groups of 8 blocks leave a remainder.
  const int rows = 19, cols = tensor_type_traits(static_cast<uint32_t>(type))->block_elements == 32 ? 608 : 512;
  const int tokens = 11;
  const Weights w = make_block_weights(type, rows, cols, 5);
  const QuantizedMatrix m(w.view());
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t x_stride = cols + 3, y_stride = rows + 2;
  std::vector<float> x(tokens * x_stride);
  for (float& f : x) f = dist(rng);
  std::vector<KernelIsa> isas{KernelIsa::kScalar};
  if (has_avx2(best_available_isa())) isas.push_back(KernelIsa::kAvx2);
  if (best_available_isa() == KernelIsa::kAvx512) isas.push_back(KernelIsa::kAvx512);
  std::vector<float> scalar;
  for (KernelIsa isa : isas) {
    std::vector<float> y(tokens * y_stride, -1.0f);
    m.multiply(x.data(), x_stride, tokens, y.data(), y_stride, isa);
    for (int t = 0; t < tokens; ++t) {
      for (int r = 0; r < rows; ++r) {
        const float* xt = x.data() + static_cast<size_t>(t) * x_stride;
        std::vector<float> row(static_cast<size_t>(cols));
        dequantize_row(type, w.view().row(r), row);
        double magnitude = 0;
        for (int j = 0; j < cols; ++j) magnitude += std::fabs(row[static_cast<size_t>(j)] * xt[j]);
        const size_t i = static_cast<size_t>(t) * y_stride + static_cast<size_t>(r);
        ASSERT_NEAR(y[i], reference_block_dot(w, r, xt), 2e-5 * (1 + magnitude))
            << isa_name(isa) << " t " << t << " r " << r;
        if (!scalar.empty()) {  // exact integer block sums, combined with the same float operations
          ASSERT_EQ(y[i], scalar[i]) << isa_name(isa) << " t " << t << " r " << r;
        }
      }
      for (size_t pad = static_cast<size_t>(rows); pad < y_stride; ++pad)
        ASSERT_EQ(y[static_cast<size_t>(t) * y_stride + pad], -1.0f) << "padding of y written";
    }
    if (scalar.empty()) scalar = y;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BlockFormatTest,
                         ::testing::Values(TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ2_K,
                                           TensorType::kQ3_K, TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
                                           TensorType::kIQ4_NL, TensorType::kIQ4_XS),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                           return tensor_type_name(param_info.param);
                         });

// Equal floats, NaN equal to NaN (extreme scales can make inf - inf in both builds).
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// The block formats the AVX-512 build multiplies on repacked panels (Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K,
// Q2_K, IQ4_NL; the others take block_dot per row), and the AVX2 build too (the super-block types in panels, the
// others by block_dot), against the scalar twin, bit for bit: row counts around the
// panels of 16 and the row groups of 4 panels, several super-blocks, 1..33 tokens (every tile
// shape: 4, 2 and 1 panels, a second group of 16 tokens), random bytes with ordinary and with extreme fp16 scales
// (any finite value, subnormal, negative), and activations that are zero, tiny, huge or sparse.
TEST(BlockFormats, PanelledKQuantsEqualTheScalarTwin) {
  if (simd_isas().empty()) GTEST_SKIP() << "no SIMD build on this CPU";
  struct Shape {
    int rows, cols;
  };
  const Shape shapes[] = {{1, 256}, {15, 512}, {16, 256}, {17, 768}, {33, 256}, {70, 1024}};
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kIQ4_XS,
                          TensorType::kQ3_K, TensorType::kQ2_K, TensorType::kIQ4_NL}) {
    for (bool extreme : {false, true}) {
      for (const Shape& shape : shapes) {
        const uint32_t seed = static_cast<uint32_t>(shape.rows * 131 + shape.cols + (extreme ? 7 : 0));
        Weights w = make_block_weights(type, shape.rows, shape.cols, seed);
        if (extreme) {  // random finite fp16 d / dmin: any exponent but the top one, either sign
          const size_t block_bytes = static_cast<size_t>(tensor_type_traits(static_cast<uint32_t>(type))->block_bytes);
          const bool d_only = type == TensorType::kQ6_K || type == TensorType::kIQ4_XS || type == TensorType::kQ3_K ||
                              type == TensorType::kIQ4_NL;
          const size_t d_at = type == TensorType::kQ6_K   ? 208
                              : type == TensorType::kQ3_K ? 108
                              : type == TensorType::kQ2_K ? 80
                                                          : 0;
          const size_t fields[2] = {d_at, d_only ? d_at : d_at + 2};
          std::mt19937 rng(seed);
          for (size_t k = 0; k < w.bytes.size() / block_bytes; ++k)
            for (size_t f : fields) {
              uint16_t h = static_cast<uint16_t>(rng());
              if ((h & 0x7C00) == 0x7C00) h = static_cast<uint16_t>(h & ~0x4000);  // no inf / NaN
              std::memcpy(w.bytes.data() + k * block_bytes + f, &h, 2);
            }
        }
        const QuantizedMatrix m(w.view());
        const int max_tokens = 33;
        const size_t x_stride = static_cast<size_t>(shape.cols) + 3, y_stride = static_cast<size_t>(shape.rows) + 5;
        std::vector<float> x(static_cast<size_t>(max_tokens) * x_stride);
        std::mt19937 rng(seed + 1);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        for (int t = 0; t < max_tokens; ++t) {
          float* xt = x.data() + static_cast<size_t>(t) * x_stride;
          for (int j = 0; j < shape.cols; ++j) {
            switch (t % 5) {
              case 0:
                xt[j] = dist(rng);
                break;
              case 1:  // a zero token: d_x = 0
                xt[j] = 0.0f;
                break;
              case 2:  // tiny and huge values side by side: most levels round to zero
                xt[j] = (j % 37 == 0 ? 1e4f : 1e-6f) * dist(rng);
                break;
              case 3:
                xt[j] = extreme ? 1e-30f * dist(rng) : 127.0f * (j % 2 ? 1.0f : -1.0f);
                break;
              default:
                xt[j] = dist(rng) * (extreme ? 1e6f : 3.0f);
                break;
            }
          }
        }
        for (int tokens : {1, 2, 3, 5, 16, 17, 33}) {
          std::vector<float> scalar(static_cast<size_t>(tokens) * y_stride, -1.0f);
          m.multiply(x.data(), x_stride, tokens, scalar.data(), y_stride, KernelIsa::kScalar);
          for (KernelIsa isa : simd_isas()) {
            std::vector<float> simd(scalar.size(), -1.0f);
            m.multiply(x.data(), x_stride, tokens, simd.data(), y_stride, isa);
            for (int t = 0; t < tokens; ++t) {
              for (int r = 0; r < shape.rows; ++r) {
                const size_t i = static_cast<size_t>(t) * y_stride + static_cast<size_t>(r);
                ASSERT_TRUE(same_float(simd[i], scalar[i]))
                    << tensor_type_name(type) << " " << isa_name(isa) << (extreme ? " extreme " : " ") << shape.rows
                    << "x" << shape.cols << " tokens " << tokens << " t " << t << " r " << r << ": " << simd[i]
                    << " vs " << scalar[i];
              }
              for (size_t pad = static_cast<size_t>(shape.rows); pad < y_stride; ++pad)
                ASSERT_EQ(simd[static_cast<size_t>(t) * y_stride + pad], -1.0f) << "padding of y written";
            }
          }
        }
      }
    }
  }
}

// The largest sums the formats allow (every level, scale and min at its largest magnitude,
// activations all of one sign at full scale): the integer sums exceed 2^24 (Q4_K..IQ4_XS), so the
// float they become is rounded, and the panels must round them as the scalar twin does; Q3_K /
// Q2_K's 16-value chains reach their largest magnitude (Q3_K: 16 * 4 * 127, meant to fit the int16
// that vpdpwssd multiplies).
TEST(BlockFormats, PanelledKQuantsEqualTheScalarTwinAtFullScale) {
  if (simd_isas().empty()) GTEST_SKIP() << "no SIMD build on this CPU";
  const int rows = 20, cols = 512, tokens = 11;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kIQ4_XS,
                          TensorType::kQ3_K, TensorType::kQ2_K, TensorType::kIQ4_NL}) {
    Weights w{type, rows, cols, std::vector<std::byte>(static_cast<size_t>(rows) * tensor_row_bytes(type, cols))};
    // IQ4_XS / IQ4_NL / Q3_K: zero bytes are their largest magnitudes, level -127 (Q3_K: -4) and
    // scale -32; Q2_K: 0xFF, level 3, scale and min 15.
    const bool zeros = type == TensorType::kIQ4_XS || type == TensorType::kIQ4_NL || type == TensorType::kQ3_K;
    for (std::byte& b : w.bytes) b = zeros ? std::byte{0} : std::byte{0xFF};
    const size_t block_bytes = static_cast<size_t>(tensor_type_traits(static_cast<uint32_t>(type))->block_bytes);
    for (size_t k = 0; k < w.bytes.size() / block_bytes; ++k) {
      const uint16_t one = f32_to_f16(1.0f), tiny = f32_to_f16(0.0f);
      if (type == TensorType::kQ6_K) {
        // int8 scales of 127 in half the rows' blocks, -1 (0xFF) in the others
        if (k % 2 == 0) std::memset(w.bytes.data() + k * block_bytes + 192, 0x7F, 16);
        std::memcpy(w.bytes.data() + k * block_bytes + 208, &one, 2);
      } else if (type == TensorType::kQ3_K || type == TensorType::kIQ4_NL) {
        std::memcpy(w.bytes.data() + k * block_bytes + (type == TensorType::kQ3_K ? 108 : 0), &one, 2);
      } else if (type == TensorType::kQ2_K) {
        std::memcpy(w.bytes.data() + k * block_bytes + 80, &one, 2);
        std::memcpy(w.bytes.data() + k * block_bytes + 82, &one, 2);
      } else if (type == TensorType::kIQ4_XS) {
        std::memcpy(w.bytes.data() + k * block_bytes, &one, 2);
        if (k % 2 == 1) {  // sub-blocks 0 and 1 at scale 15 - 32, columns 0 and 16 at level 113
          w.bytes[k * block_bytes + 4] = std::byte{0xFF};
          w.bytes[k * block_bytes + 8] = std::byte{0xFF};
        }
      } else {
        std::memcpy(w.bytes.data() + k * block_bytes, &one, 2);
        std::memcpy(w.bytes.data() + k * block_bytes + 2, k % 3 == 0 ? &tiny : &one, 2);
      }
    }
    const QuantizedMatrix m(w.view());
    std::vector<float> x(static_cast<size_t>(tokens) * cols);
    // Token 0: one level of 126 per 32 values makes every sub-block's sum odd (a sum above 2^24
    // formed in another order would round elsewhere). Tokens 3-10 (in a tile, groups 0-3, 4-7,
    // 8-10): in every 16 values 8 at full scale (token 4: 9), the rest 0, so that a 16-value sum of
    // |q| is 1016 (Q6_K: a sub-block's chain, at most 32 times it, is an int16) or 1143 (it is not).
    for (size_t j = 0; j < x.size(); ++j) {
      const size_t t = j / cols, k = j % cols;
      const size_t ones = t == 4 ? 9 : 8;
      x[j] = t == 0   ? (k % 32 == 0 ? 126.0f / 127.0f : 1.0f)
             : t == 1 ? -3.0f
             : t == 2 ? 0.5f
                      : (k % 16 < ones ? (t % 2 ? -1.0f : 1.0f) : 0.0f);
    }
    std::vector<float> scalar(static_cast<size_t>(tokens) * rows);
    m.multiply(x.data(), cols, tokens, scalar.data(), rows, KernelIsa::kScalar);
    for (KernelIsa isa : simd_isas()) {
      std::vector<float> simd(scalar.size());
      m.multiply(x.data(), cols, tokens, simd.data(), rows, isa);
      for (size_t i = 0; i < scalar.size(); ++i)
        ASSERT_TRUE(same_float(simd[i], scalar[i]))
            << tensor_type_name(type) << " " << isa_name(isa) << " " << i << ": " << simd[i] << " vs " << scalar[i];
    }
  }
}

// Hand-made blocks with known values: where each level sits in the block and how scales apply.
TEST(BlockFormats, KnownBlocksDequantizeToTheirValues) {
  {  // Q4_1: element j in the low nibble of byte j, element j + 16 in its high nibble.
    BlockQ4_1 b{};
    b.d = f32_to_f16(0.5f);
    b.m = f32_to_f16(-1.0f);
    b.qs[3] = 0x72;  // element 3 = 2, element 19 = 7
    std::vector<float> y(32);
    dequantize_row(TensorType::kQ4_1, &b, y);
    EXPECT_EQ(y[3], 0.0f);
    EXPECT_EQ(y[19], 2.5f);
    EXPECT_EQ(y[0], -1.0f);
  }
  {  // Q5_0: bit j of qh is element j's fifth bit; values biased by 16.
    BlockQ5_0 b{};
    b.d = f32_to_f16(1.0f);
    b.qh[2] = 0x02;  // bit 17: element 17
    b.qs[1] = 0x30;  // element 17's low nibble 3
    std::vector<float> y(32);
    dequantize_row(TensorType::kQ5_0, &b, y);
    EXPECT_EQ(y[17], 3.0f);  // 16 + 3 - 16
    EXPECT_EQ(y[1], -16.0f);
  }
  {  // Q4_K: sub-block 5's scale and min come from the high bits of bytes 1 / 5 and byte 9.
    BlockQ4_K b{};
    b.d = f32_to_f16(1.0f);
    b.dmin = f32_to_f16(0.25f);
    b.scales[9] = 0x23;  // sub-block 5: scale low 4 bits 3, min low 4 bits 2
    b.scales[1] = 0x40;  // scale's bits 4-5 = 1 -> scale 19
    b.scales[5] = 0x80;  // min's bits 4-5 = 2 -> min 34
    b.qs[2 * 32 + 4] = 0x50;  // sub-block 5 = high nibbles of bytes 64..95: element 164 = 5
    std::vector<float> y(256);
    dequantize_row(TensorType::kQ4_K, &b, y);
    EXPECT_EQ(y[164], 19.0f * 5 - 0.25f * 34);
    EXPECT_EQ(y[165], -0.25f * 34);
  }
  {  // Q6_K: element 200 = second half, quarter 2 (high nibbles of ql[64..95]), qh bits 4-5.
    BlockQ6_K b{};
    b.d = f32_to_f16(2.0f);
    b.scales[200 / 16] = -3;
    b.ql[64 + 8] = 0xA0;  // 200 = 128 + 64 + 8: high nibble of ql[64 + 8] = 10
    b.qh[32 + 8] = 0x30;  // bits 4-5 = 3 -> level 10 | 48 = 58, minus 32 = 26
    std::vector<float> y(256);
    dequantize_row(TensorType::kQ6_K, &b, y);
    EXPECT_EQ(y[200], 2.0f * -3 * 26);
  }
}

TEST(BlockFormats, Q8KQuantizesAsGgml) {
  std::vector<float> x(256, 0.0f);
  x[7] = -2.0f;
  x[9] = 2.0f;  // the same magnitude later: the first one (negative) sets the scale
  x[100] = 0.5f;
  x[101] = 0.0236220472f;  // 1.5 levels of 2/127: rounds to even
  BlockQ8_K b{};
  quantize_row_q8_k(x, &b);
  EXPECT_EQ(b.qs[7], -127);
  EXPECT_EQ(b.qs[9], 127);
  EXPECT_EQ(b.qs[100], 32);  // 0.5 * 63.5 = 31.75
  EXPECT_EQ(b.d, 1.0f / (-127.0f / -2.0f));
  EXPECT_EQ(b.bsums[0], 0);  // -127 + 127
  EXPECT_EQ(b.bsums[6], 32 + b.qs[101]);
  std::vector<float> zeros(256, 0.0f);
  quantize_row_q8_k(zeros, &b);
  EXPECT_EQ(b.d, 0.0f);
  EXPECT_EQ(b.qs[0], 0);
}

TEST(LinearLayer, MixedPartsAndBiasesLandInTheirRows) {
  const Weights a = make_weights(TensorType::kQ8_0, 8, 64, 1);
  const Weights b = make_weights(TensorType::kF16, 4, 64, 2);
  std::vector<float> c_values(3 * 64);
  for (size_t i = 0; i < c_values.size(); ++i) c_values[i] = static_cast<float>(i % 7) - 3.0f;
  const WeightTensor c{TensorType::kF32, c_values.data(), 3, 64};
  std::vector<float> bias_b{1, 2, 3, 4};
  const WeightTensor bb{TensorType::kF32, bias_b.data(), 1, 4};
  const LinearLayer layer({a.view(), b.view(), c}, {WeightTensor{}, bb, WeightTensor{}});
  EXPECT_EQ(layer.rows(), 15);
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  std::vector<float> y(15);
  layer.multiply(x.data(), 64, 1, y.data(), 15, KernelIsa::kScalar);
  for (int r = 0; r < 8; ++r) EXPECT_NEAR(y[static_cast<size_t>(r)], reference_dot(a, r, x.data()), 1e-4);
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(y[8 + static_cast<size_t>(r)], reference_dot(b, r, x.data()) + bias_b[static_cast<size_t>(r)], 1e-4);
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int j = 0; j < 64; ++j)
      s += static_cast<double>(c_values[static_cast<size_t>(r * 64 + j)]) * x[static_cast<size_t>(j)];
    EXPECT_NEAR(y[12 + static_cast<size_t>(r)], s, 1e-4);
  }
  EXPECT_THROW(LinearLayer({a.view(), WeightTensor{TensorType::kF32, c_values.data(), 3, 32}}), UsageError);
  EXPECT_THROW(QuantizedMatrix(WeightTensor{TensorType::kQ8_K, c_values.data(), 1, 256}), UsageError);
  EXPECT_THROW(QuantizedMatrix(WeightTensor{TensorType::kQ4_K, c_values.data(), 1, 128}), UsageError);  // half a block
}

// Parts of one type share the activations the first of them prepared: every part's rows must
// still equal its matrix multiplied alone, bit for bit, on every build, for one token and a prompt
// (F16 parts on either side of a BF16 one, Q8_0 then Q4_0, two K-quants of different types).
TEST(LinearLayer, PartsSharingPreparedActivationsEqualEachPartAlone) {
  std::vector<KernelIsa> isas{KernelIsa::kScalar};
  if (has_avx2(best_available_isa())) isas.push_back(KernelIsa::kAvx2);
  if (best_available_isa() == KernelIsa::kAvx512) isas.push_back(KernelIsa::kAvx512);
  constexpr int kCols = 512;
  std::vector<Weights> parts;
  uint32_t seed = 11;
  for (TensorType type :
       {TensorType::kF16, TensorType::kF16, TensorType::kBF16, TensorType::kF16, TensorType::kQ8_0, TensorType::kQ4_0,
        TensorType::kQ4_0, TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ6_K}) {
    const int rows = 24 + static_cast<int>(seed % 5) * 8;
    parts.push_back(type == TensorType::kQ4_K || type == TensorType::kQ6_K ? make_block_weights(type, rows, kCols, seed)
                                                                           : make_weights(type, rows, kCols, seed));
    ++seed;
  }
  const LinearLayer layer({parts[0].view(), parts[1].view(), parts[2].view(), parts[3].view(), parts[4].view(),
                           parts[5].view(), parts[6].view(), parts[7].view(), parts[8].view(), parts[9].view()});
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int tokens : {1, 37}) {
    const size_t x_stride = kCols + 3;
    std::vector<float> x(static_cast<size_t>(tokens) * x_stride);
    for (float& v : x) v = dist(rng);
    const size_t y_stride = static_cast<size_t>(layer.rows()) + 1;
    for (KernelIsa isa : isas) {
      std::vector<float> y(static_cast<size_t>(tokens) * y_stride, -1.0f);
      layer.multiply(x.data(), x_stride, tokens, y.data(), y_stride, isa);
      int offset = 0;
      for (const Weights& w : parts) {
        std::vector<float> alone(static_cast<size_t>(tokens) * static_cast<size_t>(w.rows));
        QuantizedMatrix(w.view()).multiply(x.data(), x_stride, tokens, alone.data(), static_cast<size_t>(w.rows), isa);
        for (int t = 0; t < tokens; ++t)
          for (int r = 0; r < w.rows; ++r)
            ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(offset + r)]),
                      std::bit_cast<uint32_t>(
                          alone[static_cast<size_t>(t) * static_cast<size_t>(w.rows) + static_cast<size_t>(r)]))
                << tensor_type_name(w.type) << " isa " << static_cast<int>(isa) << " token " << t << " row " << r;
        offset += w.rows;
      }
    }
  }
  // Activations prepared for one type are refused by a matrix of another.
  QuantizedMatrix::Prepared prepared;
  std::vector<float> x(kCols, 0.5f), y(64);
  QuantizedMatrix(parts[0].view()).prepare(x.data(), kCols, 1, prepared);
  EXPECT_THROW(QuantizedMatrix(parts[4].view()).multiply(prepared, y.data(), 64), UsageError);
}

// LinearLayer::multiply_all: every call's rows (F32 and quantized parts, a bias, calls of different
// token counts, one of none) as its own multiply() gives them.
TEST(LinearLayer, CallsInOneRegionEqualEachCallAlone) {
  const int threads = kernel_threads();
  const Weights a = make_weights(TensorType::kQ8_0, 600, 256, 1), b = make_weights(TensorType::kF16, 40, 256, 2);
  const Weights k = make_block_weights(TensorType::kQ4_K, 300, 256, 3);
  std::vector<float> f32_values(24 * 256), bias_values(40);
  for (size_t i = 0; i < f32_values.size(); ++i) f32_values[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < bias_values.size(); ++i) bias_values[i] = static_cast<float>(i) * 0.5f;
  const WeightTensor f32{TensorType::kF32, f32_values.data(), 24, 256},
      bias{TensorType::kF32, bias_values.data(), 1, 40};
  const std::vector<LinearLayer> layers{LinearLayer({a.view(), b.view()}), LinearLayer({k.view(), f32}),
                                        LinearLayer({b.view()}, {bias}), LinearLayer({a.view()})};
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int n : {1, 2}) {
    set_kernel_threads(n);
    std::vector<std::vector<float>> x, together, alone;
    std::vector<LinearLayer::Call> calls;
    for (size_t i = 0; i < layers.size(); ++i) {
      const int tokens = i == 3 ? 0 : 1 + static_cast<int>(i) * 5;
      const size_t y_stride = static_cast<size_t>(layers[i].rows()) + 1;
      std::vector<float>& xi = x.emplace_back(static_cast<size_t>(std::max(tokens, 1)) * 256);
      for (float& v : xi) v = dist(rng);
      together.emplace_back(static_cast<size_t>(std::max(tokens, 1)) * y_stride, -1.0f);
      alone.emplace_back(together.back());
      layers[i].multiply(xi.data(), 256, tokens, alone[i].data(), y_stride);
      calls.push_back({&layers[i], xi.data(), 256, tokens, together[i].data(), y_stride});
    }
    LinearLayer::multiply_all(calls);
    for (size_t i = 0; i < layers.size(); ++i)
      ASSERT_EQ(together[i], alone[i]) << "layer " << i << ", " << n << " threads";
  }
  set_kernel_threads(threads);
}

}  // namespace
}  // namespace pagedkv
