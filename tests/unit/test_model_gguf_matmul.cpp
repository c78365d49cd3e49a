// QuantizedMatrix (F16, BF16, Q8_0, Q4_0 weights read in place) against a float64 reference of the
// same arithmetic, every available ISA against the scalar twin, and LinearLayer's mixing of parts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/quant/linear_layer.h"
#include "pagedkv/model/quant/quantized_matrix.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {
namespace {

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
  for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (!(best_available_isa() == isa || (isa == KernelIsa::kAvx2 && best_available_isa() == KernelIsa::kAvx512)))
      continue;
    std::vector<float> simd(tokens * y_stride, -1.0f);
    m.multiply(x.data(), x_stride, tokens, simd.data(), y_stride, isa);
    for (size_t i = 0; i < simd.size(); ++i) EXPECT_NEAR(simd[i], scalar[i], 1e-5 * (1 + std::fabs(scalar[i]))) << isa_name(isa);
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
  std::vector<KernelIsa> isas;
  if (has_avx2(best_available_isa())) isas.push_back(KernelIsa::kAvx2);
  if (best_available_isa() == KernelIsa::kAvx512) isas.push_back(KernelIsa::kAvx512);
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
        dequantize_row(type, w.view().row(r), std::span(w_abs).subspan(static_cast<size_t>(r * shape.cols), static_cast<size_t>(shape.cols)));
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
                             std::fabs(x[static_cast<size_t>(t) * x_stride + static_cast<size_t>(j)]) * (quantized ? 1.01 : 1.0);
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
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(y[8 + static_cast<size_t>(r)], reference_dot(b, r, x.data()) + bias_b[static_cast<size_t>(r)], 1e-4);
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int j = 0; j < 64; ++j) s += static_cast<double>(c_values[static_cast<size_t>(r * 64 + j)]) * x[static_cast<size_t>(j)];
    EXPECT_NEAR(y[12 + static_cast<size_t>(r)], s, 1e-4);
  }
  EXPECT_THROW(LinearLayer({a.view(), WeightTensor{TensorType::kF32, c_values.data(), 3, 32}}), UsageError);
  EXPECT_THROW(QuantizedMatrix(WeightTensor{TensorType::kQ4_K, c_values.data(), 1, 256}), UsageError);
}

}  // namespace
}  // namespace pagedkv
