// The quantized KV formats: fp8 e4m3 conversions on all 256 codes against the OCP definition,
// int8/fp8 row quantization within half a quantization step, int8 keys with an f16 scale and
// offset (fitted), stored Hadamard-rotated,
// and int8/fp8 blocks in the arena (scales inside the slot, so write/gather/copy/swap and the
// memory math carry them).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "storage_test_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/storage/block_table.h"
#include "pagedkv/storage/fp8_e4m3.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/storage/kv_ops.h"
#include "pagedkv/storage/key_rotation.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv {
namespace {

// The OCP e4m3 value of a code, from the definition, in double.
double ocp_e4m3(uint8_t code) {
  const int sign = code >> 7, exponent = (code >> 3) & 0xF, mantissa = code & 7;
  if (exponent == 0xF && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa / 8.0, -6) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

TEST(Fp8E4M3, DecodesAll256CodesAsTheOcpDefinition) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const double expected = ocp_e4m3(code);
    const float got = fp8_e4m3_to_f32(code);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_EQ(std::signbit(got), c >= 0x80) << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), expected) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 0x80) << "code " << c;  // -0 included
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only: no infinities
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0x1p-6f);
}

TEST(Fp8E4M3, EncodeRoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((code & 0x7F) == 0x7F) continue;  // the NaNs, below
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(code)), code) << c;
  }
}

TEST(Fp8E4M3, EncodeRoundsToNearestEvenBetweenEveryPairOfCodes) {
  // Non-negative finite codes in increasing order are 0x00 .. 0x7E.
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = ocp_e4m3(static_cast<uint8_t>(c)), hi = ocp_e4m3(static_cast<uint8_t>(c + 1));
    const double mid = (lo + hi) / 2;  // exact in f32: one bit more than e4m3's mantissa
    const auto even = static_cast<uint8_t>((c & 1) == 0 ? c : c + 1);
    for (int sign : {1, -1}) {
      const int s = sign < 0 ? 0x80 : 0;
      const auto at = [&](double v) { return f32_to_fp8_e4m3(static_cast<float>(sign * v)); };
      EXPECT_EQ(at(mid), s | even) << "tie between codes " << c << " and " << c + 1;
      EXPECT_EQ(at(std::nextafter(static_cast<float>(mid), 0.0f)), s | c) << c;
      EXPECT_EQ(at(std::nextafter(static_cast<float>(mid), 1e9f)), s | (c + 1)) << c;
    }
  }
}

TEST(Fp8E4M3, SaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float big : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), inf}) {
    EXPECT_EQ(f32_to_fp8_e4m3(big), 0x7E) << big;
    EXPECT_EQ(f32_to_fp8_e4m3(-big), 0xFE) << big;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-11f), 0x00);  // a quarter step: down to zero
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-10f), 0x00);  // half of 2^-9: tie to even (0)
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

// |x - scale * code| <= scale / 2 for every element (int8), and the fp8 step of the element's
// binade for fp8; a row's largest element maps to the largest code.
TEST(KVQuantize, EveryElementWithinHalfAStep) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType dtype : {DType::kInt8, DType::kFP8})
    for (size_t n : {1u, 7u, 64u, 128u})
      for (float spread : {1e-3f, 1.0f, 300.0f}) {
        std::vector<float> x(n), back(n);
        for (auto& v : x) v = spread * normal(rng);
        std::vector<uint8_t> codes(n);
        const float scale = quantize_row(dtype, x.data(), n, codes.data());
        dequantize_row(dtype, codes.data(), scale, n, back.data());
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        const float code_max = dtype == DType::kInt8 ? 127.0f : 448.0f;
        EXPECT_FLOAT_EQ(scale, amax / code_max);
        for (size_t i = 0; i < n; ++i) {
          double step = scale;  // int8: one code
          if (dtype == DType::kFP8) {
            // fp8: the spacing of codes around x / scale (2^-9 below 2^-6).
            const double y = std::fabs(static_cast<double>(x[i]) / scale);
            step = y < 0x1p-6 ? 0x1p-9 * scale : std::ldexp(1.0 / 8, std::ilogb(y)) * scale;
          }
          // Half a step, and the f32 roundings of x / scale and scale * code.
          const double bound = step / 2 * (1 + 1e-5) + 1e-6 * std::fabs(x[i]);
          EXPECT_LE(std::fabs(static_cast<double>(back[i]) - x[i]), bound)
              << dtype_name(dtype) << " n=" << n << " i=" << i << " x=" << x[i];
          if (dtype == DType::kInt8) {
            EXPECT_GE(static_cast<int8_t>(codes[i]), -127);
          }
        }
      }
}

TEST(KVQuantize, ZeroAndNonFiniteRows) {
  for (DType dtype : {DType::kInt8, DType::kFP8}) {
    std::vector<float> zeros(16, 0.0f), out(16, 1.0f);
    std::vector<uint8_t> codes(16, 0xAA);
    EXPECT_EQ(quantize_row(dtype, zeros.data(), 16, codes.data()), 0.0f);
    dequantize_row(dtype, codes.data(), 0.0f, 16, out.data());
    for (float v : out) EXPECT_EQ(v, 0.0f);
    // In a vector lane of the row's max and in the scalar tail after the last whole vector.
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()})
      for (size_t at : {size_t{5}, size_t{17}}) {
        std::vector<float> row(18, 1.0f);
        std::vector<uint8_t> wide(18);
        row[at] = bad;
        const float scale = quantize_row(dtype, row.data(), row.size(), wide.data());
        EXPECT_TRUE(std::isnan(scale)) << dtype_name(dtype) << " at " << at;
      }
  }
  std::vector<float> x(4, 1.0f);
  std::vector<uint8_t> codes(4);
  EXPECT_THROW(quantize_row(DType::kF16, x.data(), 4, codes.data()), UsageError);
}

// int8 codes round x / scale to nearest with ties to even, as std::nearbyint does: a row whose
// max is 127 has scale 1, so its halves are exact ties.
TEST(KVQuantize, Int8RoundsTiesToEven) {
  const std::vector<float> row{127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 126.5f, -126.5f, 1.49f};
  std::vector<int8_t> codes(row.size());
  ASSERT_EQ(quantize_row(DType::kInt8, row.data(), row.size(), codes.data()), 1.0f);
  const std::vector<int8_t> expected{127, 2, 4, -2, -4, 0, 0, 126, -126, 1};
  EXPECT_EQ(codes, expected);
}

double squared_error(const float* x, const int8_t* codes, float scale, float offset, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double{x[i]} - (double{scale} * codes[i] + offset);
    e += d * d;
  }
  return e;
}

// int8 keys: scale * code + offset with an f16 scale and offset; every element within half a
// step of it (no clipping), codes in [-127, 127], the scale within [range / 255, range / 223]
// (up to the f16 roundings), and both halves exactly f16 values.
TEST(KVQuantize, Int8KeyRowKeepsEveryElementWithinHalfAStepOfScaleTimesCodePlusOffset) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  EXPECT_EQ(int8_key_fit_candidates(8), 16u);
  EXPECT_EQ(int8_key_fit_candidates(16), 8u);
  EXPECT_EQ(int8_key_fit_candidates(32), 4u);
  EXPECT_EQ(int8_key_fit_candidates(13), 9u);
  EXPECT_EQ(int8_key_fit_candidates(33), 1u);
  EXPECT_EQ(int8_key_fit_candidates(64), 1u);
  EXPECT_EQ(int8_key_fit_candidates(128), 1u);
  EXPECT_EQ(int8_key_fit_candidates(1), 16u);
  EXPECT_TRUE(int8_keys_have_offsets(DType::kInt8));
  EXPECT_FALSE(int8_keys_have_offsets(DType::kFP8));
  for (size_t n : {1u, 3u, 7u, 8u, 13u, 16u, 32u, 64u, 128u, 256u})
    for (float spread : {1e-6f, 1e-3f, 1.0f, 300.0f})
      for (float shift : {0.0f, 1.0f, -50.0f})  // rows leaning to one side, or far from zero
        for (int trial = 0; trial < 12; ++trial) {
          std::vector<float> x(n);
          for (auto& v : x) v = spread * normal(rng) + shift * spread;
          if (trial == 1) x[n / 2] = 40 * spread;  // an outlier
          std::vector<int8_t> codes(n);
          const uint32_t packed = quantize_key_row_int8(x.data(), n, codes.data());
          const KeyScaleOffset so = unpack_key_scale_offset(packed);
          ASSERT_EQ(pack_key_scale_offset(so.scale, so.offset), packed);  // f16 values, both
          const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
          const double range = double{*hi} - *lo;
          for (size_t i = 0; i < n; ++i) {
            const double back = double{so.scale} * codes[i] + so.offset;
            // Half a step, and the f32 roundings of (x - offset) / scale and scale * code + offset.
            const double bound = double{so.scale} / 2 * (1 + 1e-5) + 1e-6 * (std::fabs(x[i]) + std::fabs(so.offset));
            ASSERT_LE(std::fabs(back - x[i]), bound) << "n=" << n << " i=" << i << " x=" << x[i];
            ASSERT_GE(codes[i], -127);
          }
          // At most range / 223 (the lowest candidate, refined), up to the offset's f16 rounding
          // and the scale's f16 rounding up; at least the f16 subnormal step.
          const double offset_slack = std::fabs(double{so.offset}) * 0x1p-11;
          EXPECT_LE(so.scale, (range / 2 + offset_slack) / (kInt8FitLowestTopCode - 0.5f) * (1 + 0x1p-10) + 0x1p-24)
              << "n=" << n;
        }
}

// What the offset and the fitted step are for: on rows of 8 normal values (stories260K's key rows,
// rotated) the squared error falls to about a fifth of amax / 127's (0.20 in a float64
// simulation), on rows of 16 to about 0.4, on 128 to 0.83 (the midpoint alone).
TEST(KVQuantize, Int8KeyRowCutsTheSquaredErrorOfAmaxOver127) {
  std::mt19937_64 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [n, ratio] : {std::pair{size_t{8}, 0.3}, std::pair{size_t{16}, 0.5}, std::pair{size_t{128}, 0.9}}) {
    double keys = 0, amax_over_127 = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<float> x(n);
      for (auto& v : x) v = normal(rng);
      std::vector<int8_t> codes(n);
      const KeyScaleOffset so = unpack_key_scale_offset(quantize_key_row_int8(x.data(), n, codes.data()));
      keys += squared_error(x.data(), codes.data(), so.scale, so.offset, n);
      const float scale = quantize_row(DType::kInt8, x.data(), n, codes.data());
      amax_over_127 += squared_error(x.data(), codes.data(), scale, 0.0f, n);
    }
    EXPECT_LT(keys, ratio * amax_over_127) << "n=" << n << ": " << keys / amax_over_127;
  }
}

TEST(KVQuantize, Int8KeyRowsThatAreConstantEmptyNonFiniteOrBeyondF16) {
  std::vector<int8_t> codes(8, 5);
  // All elements one f16 value: scale 0, the value as the offset.
  std::vector<float> flat(8, 0.75f);
  EXPECT_EQ(unpack_key_scale_offset(quantize_key_row_int8(flat.data(), 8, codes.data())).scale, 0.0f);
  EXPECT_EQ(unpack_key_scale_offset(quantize_key_row_int8(flat.data(), 8, codes.data())).offset, 0.75f);
  for (int8_t c : codes) EXPECT_EQ(c, 0);
  std::vector<float> zeros(8, 0.0f);
  EXPECT_EQ(quantize_key_row_int8(zeros.data(), 8, codes.data()), 0u);
  EXPECT_EQ(quantize_key_row_int8(zeros.data(), 0, codes.data()), 0u);
  // Not an f16 value: the offset's rounding is taken up by codes of +-127 and a tiny scale.
  std::vector<float> third(8, 1.0f / 3);
  const KeyScaleOffset so = unpack_key_scale_offset(quantize_key_row_int8(third.data(), 8, codes.data()));
  EXPECT_NEAR(so.scale * codes[0] + so.offset, 1.0f / 3, so.scale / 2 * (1 + 1e-5));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(), 2 * kKeyF16Max, -2 * kKeyF16Max}) {
    std::vector<float> row(8, 1.0f);
    row[3] = bad;
    EXPECT_EQ(quantize_key_row_int8(row.data(), 8, codes.data()), kNaNKeyScaleOffset) << bad;
    const KeyScaleOffset nan = unpack_key_scale_offset(kNaNKeyScaleOffset);
    EXPECT_TRUE(std::isnan(nan.scale) && std::isnan(nan.offset));
    for (int8_t c : codes) EXPECT_EQ(c, 0);
  }
  std::vector<float> edge(8, -kKeyF16Max);
  edge[0] = kKeyF16Max;  // the largest range the f16 scale holds
  const KeyScaleOffset wide = unpack_key_scale_offset(quantize_key_row_int8(edge.data(), 8, codes.data()));
  EXPECT_TRUE(std::isfinite(wide.scale) && std::isfinite(wide.offset));
  EXPECT_NEAR(wide.scale * codes[0] + wide.offset, kKeyF16Max, wide.scale / 2 * (1 + 1e-5));
}

TEST(KVQuantize, BytesPerTokenIncludeTheScales) {
  // Llama-3-8B per layer: 8 KV heads x 128: 1,024 bytes of codes and 32 of scales, for K and V.
  EXPECT_EQ(testing::kv_spec(DType::kInt8, 16, 8, 128).bytes_per_token_per_layer(), 2u * (1024 + 32));
  EXPECT_EQ(testing::kv_spec(DType::kFP8, 16, 8, 128).bytes_per_token_per_layer(), 2u * (1024 + 32));
  EXPECT_EQ(testing::kv_spec(DType::kF16, 16, 8, 128).bytes_per_token_per_layer(), 2u * 2048);
  EXPECT_EQ(testing::kv_spec(DType::kInt8, 16, 8, 128).bytes_per_block_per_layer(), 16u * 2 * 1056);
  KVArena arena(testing::kv_spec(DType::kInt8, 4, 3, 8), 2, 5);
  const KVLayerView v = arena.layer(0);
  EXPECT_EQ(v.rows_bytes(), 24u);
  EXPECT_EQ(v.slot_bytes(), 24u + 12u);
  EXPECT_EQ(v.block_bytes(), 4u * 36u);
  EXPECT_EQ(arena.bytes_per_block(), 2u * 2u * 4u * 36u);
}

// Writes random rows through write_kv; returns them as written.
std::vector<float> write_random(const KVLayerView& kv, int tokens, std::vector<int64_t>& slots, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const size_t row = kv.token_stride_elems();
  std::vector<float> x(static_cast<size_t>(tokens) * row * 2);
  for (auto& v : x) v = normal(rng);
  write_kv(kv, x.data(), x.data() + static_cast<size_t>(tokens) * row, slots.data(), tokens);
  return x;
}

TEST(KVQuantize, WriteGatherAndCopyCarryTheScales) {
  for (DType dtype : {DType::kInt8, DType::kFP8}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int bs = 4, heads = 3, dim = 16, tokens = 10;
    KVArena arena(testing::kv_spec(dtype, bs, heads, dim), 2, 8);
    arena.fill_nan();
    const KVLayerView kv = arena.layer(1);
    const int32_t table[] = {5, 2, 7};
    std::vector<int64_t> slots(tokens);
    compute_slot_mapping(table, bs, 0, tokens, slots.data());
    const std::vector<float> x = write_random(kv, tokens, slots, 11);
    const size_t row = kv.token_stride_elems();
    std::vector<float> k(static_cast<size_t>(tokens) * row), v(k.size());
    gather_kv(kv, table, tokens, k.data(), v.data());
    const float tolerance = dtype == DType::kInt8 ? 0.05f : 0.5f;  // 2-sigma rows: amax ~ 6-8
    for (size_t i = 0; i < k.size(); ++i) {
      EXPECT_NEAR(k[i], x[i], tolerance);
      EXPECT_NEAR(v[i], x[k.size() + i], tolerance);
    }
    // Copy-on-write of the blocks, then swap to another arena and back: the same dequantized
    // values come out (the scales travel inside the blocks).
    const std::pair<BlockId, BlockId> cow[] = {
        {BlockId(5), BlockId(1)}, {BlockId(2), BlockId(3)}, {BlockId(7), BlockId(4)}};
    copy_blocks(arena, cow);
    KVArena host(testing::kv_spec(dtype, bs, heads, dim), 2, 8);
    const std::pair<BlockId, BlockId> out[] = {
        {BlockId(1), BlockId(6)}, {BlockId(3), BlockId(2)}, {BlockId(4), BlockId(5)}};
    copy_blocks_between(arena, host, out);
    const int32_t host_table[] = {6, 2, 5};
    std::vector<float> k2(k.size()), v2(v.size());
    gather_kv(host.layer(1), host_table, tokens, k2.data(), v2.data());
    EXPECT_EQ(std::memcmp(k.data(), k2.data(), k.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(v.data(), v2.data(), v.size() * sizeof(float)), 0);
  }
}

TEST(KVQuantize, FillNanMakesEveryScaleNaN) {
  for (DType dtype : {DType::kInt8, DType::kFP8}) {
    KVArena arena(testing::kv_spec(dtype, 2, 2, 8), 1, 3);
    arena.fill_nan();
    const KVLayerView kv = arena.layer(0);
    const int32_t table[] = {1, 2};
    std::vector<float> k(4 * 16), v(k.size());
    gather_kv(kv, table, 4, k.data(), v.data());
    EXPECT_TRUE(std::all_of(k.begin(), k.end(), [](float x) { return std::isnan(x); }));
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); }));
  }
}

TEST(KeyRotation, HadamardIsTheNormalizedSylvesterMatrixAndItsOwnInverse) {
  for (const size_t n : {2u, 4u, 8u, 16u, 64u, 256u}) {
    SCOPED_TRACE(n);
    for (size_t j = 0; j < n; ++j) {
      std::vector<float> e(n, 0.0f);
      e[j] = 1.0f;
      hadamard_rotate(e.data(), n);
      // Column j of Sylvester's matrix: H[i][j] = (-1)^popcount(i & j), over sqrt(n).
      for (size_t i = 0; i < n; ++i) {
        const double expected = (std::popcount(i & j) % 2 ? -1.0 : 1.0) / std::sqrt(static_cast<double>(n));
        ASSERT_NEAR(e[i], expected, 1e-6) << i << "," << j;
      }
    }
    std::mt19937_64 rng(n);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = normal(rng);
    y = x;
    hadamard_rotate(y.data(), n);
    double norm_x = 0, norm_y = 0;
    for (size_t i = 0; i < n; ++i) {
      norm_x += double{x[i]} * x[i];
      norm_y += double{y[i]} * y[i];
    }
    EXPECT_NEAR(norm_y, norm_x, 1e-4 * norm_x);  // orthonormal
    hadamard_rotate(y.data(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 1e-5f * 3.0f * std::sqrt(static_cast<float>(n)));
  }
}

TEST(KeyRotation, OnlyInt8KeysOfPowerOfTwoHeadsRotate) {
  for (int dim : {2, 8, 16, 64, 128, 256, 512}) EXPECT_TRUE(keys_are_rotated(DType::kInt8, dim)) << dim;
  for (int dim : {1, 12, 24, 96, 1024}) EXPECT_FALSE(keys_are_rotated(DType::kInt8, dim)) << dim;
  for (DType d : {DType::kFP8, DType::kF16, DType::kBF16, DType::kF32}) EXPECT_FALSE(keys_are_rotated(d, 64));
}

TEST(KVQuantize, Int8KeysAreStoredRotatedAndAnOutlierNoLongerCoarsensTheirRow) {
  // One outlier channel (keys have them) and seven small values: unrotated, the step is
  // 40 / 127 and the small values lose most of their digits; rotated, the row is flat.
  const int dim = 8;
  const float key[dim] = {0.31f, -0.12f, 40.0f, 0.05f, -0.27f, 0.18f, -0.09f, 0.22f};
  const float value[dim] = {1, 2, 3, 4, 5, 6, 7, 8};
  KVArena arena(testing::kv_spec(DType::kInt8, 4, 1, dim), 1, 2);
  const KVLayerView kv = arena.layer(0);
  const int64_t slot = 4;  // block 1, first slot
  write_kv(kv, key, value, &slot, 1);
  // The stored codes, scale and offset are quantize_key_row_int8's of H k.
  float rotated[dim];
  std::copy(key, key + dim, rotated);
  hadamard_rotate(rotated, dim);
  int8_t codes[dim];
  const uint32_t packed = quantize_key_row_int8(rotated, dim, codes);
  const float scale = unpack_key_scale_offset(packed).scale;
  const auto* stored = static_cast<const std::byte*>(kv.key) + static_cast<size_t>(slot) * kv.slot_bytes();
  EXPECT_EQ(std::memcmp(stored, codes, dim), 0);
  uint32_t stored_scale_offset;
  std::memcpy(&stored_scale_offset, stored + kv.rows_bytes(), sizeof stored_scale_offset);
  EXPECT_EQ(stored_scale_offset, packed);
  // gather_kv rotates back; the error vector's length is the rotated row's, at most
  // sqrt(dim) half steps, and smaller than quantizing the row as it is.
  const int32_t table[] = {1};
  float k[dim], v[dim];
  gather_kv(kv, table, 1, k, v);
  float plain[dim];
  int8_t plain_codes[dim];
  dequantize_row(DType::kInt8, plain_codes, quantize_row(DType::kInt8, key, dim, plain_codes), dim, plain);
  double err_rotated = 0, err_plain = 0;
  for (int i = 0; i < dim; ++i) {
    err_rotated += (double{k[i]} - key[i]) * (double{k[i]} - key[i]);
    err_plain += (double{plain[i]} - key[i]) * (double{plain[i]} - key[i]);
  }
  EXPECT_LE(std::sqrt(err_rotated), std::sqrt(static_cast<double>(dim)) * scale / 2 + 1e-6);
  EXPECT_LT(err_rotated, err_plain / 4) << "rotation should cut this row's squared error several times";
  for (int i = 0; i < dim; ++i) EXPECT_NEAR(v[i], value[i], 8.0f / 127 / 2 + 1e-6f) << "values are not rotated";
}

}  // namespace
}  // namespace pagedkv
