// The int8 row quantizers' builds against their references (KernelIsa::kScalar), bit for bit:
// quantize_key_row_int8's codes, f16 scale and f16 offset, and quantize_row's (values: amax /
// 127) codes and f32 scale, over random rows of every length from 1 to 300 (the 16-, 8-
// and 4-candidate searches, their partial lane groups, and the midpoint-only rows) and of every
// shape the search treats apart: wide and narrow ranges, a far offset, outliers, few distinct
// values (no least-squares fit), constants, zeros of both signs, NaN and infinity, f16
// subnormals, and elements at and just past +-kKeyF16Max. And write_kv, which picks the build
// per call (and on AVX2 and AVX-512 searches a token's key rows several at once, rotated first),
// stores the same bytes whichever it runs. The builds compared are the CPU's: AVX2 and AVX-512
// where it has them. ctest also runs this file under PAGEDKV_ISA=scalar, where the default must
// be the reference itself.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "storage_test_support.h"
#include "pagedkv/storage/block_table.h"
#include "pagedkv/storage/cpu_isa.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/storage/kv_ops.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv {
namespace {

// The builds this CPU can run, other than the reference, and the default.
std::vector<KernelIsa> builds_to_compare() {
  std::vector<KernelIsa> v{KernelIsa::kAuto};
  if (has_avx2(best_available_isa())) v.push_back(KernelIsa::kAvx2);
  if (best_available_isa() == KernelIsa::kAvx512) v.push_back(KernelIsa::kAvx512);
  return v;
}

enum class RowKind {
  kNormal,
  kUniform,
  kFarOffset,
  kOutlier,
  kFewValues,
  kHalfSteps,
  kConstant,
  kZeros,
  kNonFinite,
  kSubnormal,
  kF16Edges,
  kCount
};

const char* kind_name(RowKind k) {
  static const char* const names[] = {"normal",   "uniform", "far offset", "outlier",       "few values", "half steps",
                                      "constant", "zeros",   "non-finite", "f16 subnormal", "f16 edges"};
  return names[static_cast<int>(k)];
}

std::vector<float> make_row(RowKind kind, size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<size_t> index(0, n - 1);
  // A magnitude from 1e-6 to 1e3, so that scales cross the f16 subnormals and large steps.
  const float magnitude = std::pow(10.0f, -6.0f + 9.0f * unit(rng));
  std::vector<float> x(n);
  switch (kind) {
    case RowKind::kNormal:
      for (auto& v : x) v = magnitude * normal(rng);
      break;
    case RowKind::kUniform:
      for (auto& v : x) v = magnitude * (2.0f * unit(rng) - 1.0f);
      break;
    case RowKind::kFarOffset: {  // a mean far from zero against the spread
      const float mean = magnitude * (unit(rng) < 0.5f ? -300.0f : 300.0f);
      for (auto& v : x) v = std::fmin(std::fmax(mean + magnitude * normal(rng), -kKeyF16Max), kKeyF16Max);
      break;
    }
    case RowKind::kOutlier:
      for (auto& v : x) v = magnitude * normal(rng);
      x[index(rng)] *= 100.0f;
      break;
    case RowKind::kFewValues: {  // two or three distinct values: lanes whose codes are all equal
      const float a = magnitude * normal(rng), b = magnitude * normal(rng);
      for (auto& v : x) v = unit(rng) < 0.5f ? a : (unit(rng) < 0.9f ? b : a + b);
      break;
    }
    case RowKind::kHalfSteps:  // multiples of 1/2: codes at exact rounding ties
      for (auto& v : x) v = 0.5f * std::round(16.0f * normal(rng));
      break;
    case RowKind::kConstant: {  // an f16 value, or not one
      const float c = unit(rng) < 0.5f ? 1.5f : magnitude * normal(rng);
      x.assign(n, c);
      break;
    }
    case RowKind::kZeros:
      for (auto& v : x) v = unit(rng) < 0.5f ? 0.0f : -0.0f;
      break;
    case RowKind::kNonFinite: {
      for (auto& v : x) v = normal(rng);
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
      x[index(rng)] = specials[index(rng) % 4];
      break;
    }
    case RowKind::kSubnormal:  // around the f16 subnormals (2^-24 .. 2^-14)
      for (auto& v : x) v = 1e-6f * normal(rng);
      break;
    case RowKind::kF16Edges: {
      for (auto& v : x) v = kKeyF16Max * (2.0f * unit(rng) - 1.0f);
      const float edges[] = {kKeyF16Max,
                             -kKeyF16Max,
                             std::nextafter(kKeyF16Max, 1e9f),
                             std::nextafter(-kKeyF16Max, -1e9f),
                             std::nextafter(kKeyF16Max, 0.0f),
                             65504.0f};
      x[index(rng)] = edges[index(rng) % 6];
      if (unit(rng) < 0.3f) x[index(rng)] = edges[index(rng) % 6];
      break;
    }
    case RowKind::kCount:
      break;
  }
  return x;
}

TEST(QuantizeIsa, EveryBuildMatchesTheReferenceBitForBit) {
  const std::vector<KernelIsa> builds = builds_to_compare();
  std::mt19937_64 rng(2026);
  size_t rows = 0, nan_rows = 0, searched_rows = 0;
  for (size_t n = 1; n <= 300; ++n) {
    const int per_kind = n <= 40 ? 96 : 12;  // the searched lengths most
    for (int k = 0; k < static_cast<int>(RowKind::kCount); ++k) {
      const auto kind = static_cast<RowKind>(k);
      for (int r = 0; r < per_kind; ++r) {
        const std::vector<float> x = make_row(kind, n, rng);
        std::vector<int8_t> reference(n, 99), codes(n, 99);
        const uint32_t want = quantize_key_row_int8(x.data(), n, reference.data(), KernelIsa::kScalar);
        for (KernelIsa isa : builds) {
          std::fill(codes.begin(), codes.end(), int8_t{99});
          const uint32_t got = quantize_key_row_int8(x.data(), n, codes.data(), isa);
          ASSERT_EQ(got, want) << isa_name(isa) << ", n = " << n << ", " << kind_name(kind) << " row " << r
                               << ": packed scale and offset differ";
          ASSERT_EQ(std::memcmp(codes.data(), reference.data(), n), 0)
              << isa_name(isa) << ", n = " << n << ", " << kind_name(kind) << " row " << r << ": codes differ";
        }
        std::vector<int8_t> value_reference(n, 99);
        const float want_scale = quantize_row(DType::kInt8, x.data(), n, value_reference.data(), KernelIsa::kScalar);
        for (KernelIsa isa : builds) {
          std::fill(codes.begin(), codes.end(), int8_t{99});
          const float got = quantize_row(DType::kInt8, x.data(), n, codes.data(), isa);
          ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want_scale))
              << isa_name(isa) << ", n = " << n << ", " << kind_name(kind) << " row " << r << ": value scale differs";
          ASSERT_EQ(std::memcmp(codes.data(), value_reference.data(), n), 0)
              << isa_name(isa) << ", n = " << n << ", " << kind_name(kind) << " row " << r << ": value codes differ";
        }
        ++rows;
        nan_rows += want == kNaNKeyScaleOffset;
        searched_rows += int8_key_fit_candidates(n) > 1;
      }
    }
  }
  // The rows reached what they are meant to: NaN rows and searched rows among them.
  EXPECT_GT(nan_rows, rows / 20);
  EXPECT_GT(searched_rows, rows / 4);
}

// The reference's own result on a few rows the search treats apart, so that a change to it that
// the builds copied would still be seen: an empty row, a constant one, a NaN one.
TEST(QuantizeIsa, TheKeysEdgeRowsGiveTheDocumentedPairs) {
  for (KernelIsa isa : {KernelIsa::kScalar, KernelIsa::kAuto}) {
    int8_t codes[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_EQ(quantize_key_row_int8(nullptr, 0, codes, isa), pack_key_scale_offset(0.0f, 0.0f));
    const float constant[8] = {2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f};
    EXPECT_EQ(quantize_key_row_int8(constant, 8, codes, isa), pack_key_scale_offset(0.0f, 2.5f));
    for (int8_t c : codes) EXPECT_EQ(c, 0);
    const float beyond[3] = {1.0f, -40000.0f, 2.0f};
    EXPECT_EQ(quantize_key_row_int8(beyond, 3, codes, isa), kNaNKeyScaleOffset);
  }
}

// A row of -2^-149 values is plain (half = 2^-149 > 0) with a midpoint of -0 (0.5 x -2^-149
// rounds to -0): every build keeps that sign in the stored offset, also where write_kv searches a
// token's rows together (4 heads x 12: not rotated, 12 not being a power of two). A vector f16
// rounding that adds +0, as the search's own offsets do, would lose it there.
TEST(QuantizeIsa, ANegativeZeroMidpointKeepsItsSign) {
  const float tiny = -std::numeric_limits<float>::denorm_min();
  const std::vector<float> row(12, tiny);
  int8_t codes[12];
  const uint32_t want = quantize_key_row_int8(row.data(), row.size(), codes, KernelIsa::kScalar);
  EXPECT_EQ(want >> 16, 0x8000u) << "the reference's f16 offset is -0";
  for (KernelIsa isa : builds_to_compare())
    EXPECT_EQ(quantize_key_row_int8(row.data(), row.size(), codes, isa), want) << isa_name(isa);
  const int heads = 4, dim = 12, block_size = 16;
  const KVCacheSpec spec = testing::kv_spec(DType::kInt8, block_size, heads, dim);
  const std::vector<float> k(heads * dim, tiny), v(heads * dim, 1.0f);
  std::vector<int32_t> table{0};
  std::vector<int64_t> slots(1);
  compute_slot_mapping(table.data(), block_size, 0, 1, slots.data());
  for (KernelIsa isa : builds_to_compare()) {
    KVArena arena(spec, 1, 1);
    write_kv(arena.layer(0), k.data(), v.data(), slots.data(), 1, isa);
    uint32_t packed[heads];
    std::memcpy(packed, static_cast<const std::byte*>(arena.layer(0).key) + arena.layer(0).rows_bytes(), sizeof packed);
    for (uint32_t p : packed) EXPECT_EQ(p, want) << isa_name(isa);
  }
}

// write_kv quantizes a token's heads together (several key rows searched at once): rows of every
// kind side by side in one token, so that a NaN or constant head sits next to searched ones.
TEST(QuantizeIsa, WriteKvStoresTheSameBytesWhicheverBuildItRuns) {
  // Rotated (power-of-two heads, 2 to 512: rows sharing a register, and whole registers) and not.
  const std::pair<int, int> shapes[] = {{4, 8},  {5, 8}, {9, 16}, {2, 16}, {8, 128}, {3, 24},  {6, 12},
                                        {4, 32}, {1, 7}, {3, 2},  {3, 4},  {2, 64},  {1, 256}, {1, 512}};
  for (const auto& [heads, dim] : shapes) {
    const int tokens = 40, block_size = 16;
    const KVCacheSpec spec = testing::kv_spec(DType::kInt8, block_size, heads, dim);
    std::vector<int32_t> table{0, 1, 2};
    std::vector<int64_t> slots(tokens);
    compute_slot_mapping(table.data(), block_size, 0, tokens, slots.data());
    std::mt19937_64 rng(static_cast<uint64_t>(heads * 1000 + dim));
    std::uniform_int_distribution<int> pick_kind(0, static_cast<int>(RowKind::kCount) - 1);
    std::vector<float> k, v;
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h) {
        // Mostly plain rows, a quarter of them of any kind.
        const RowKind kind = rng() % 4 == 0 ? static_cast<RowKind>(pick_kind(rng)) : RowKind::kNormal;
        const std::vector<float> key_row = make_row(kind, static_cast<size_t>(dim), rng);
        const std::vector<float> value_row =
            make_row(static_cast<RowKind>(pick_kind(rng)), static_cast<size_t>(dim), rng);
        k.insert(k.end(), key_row.begin(), key_row.end());
        v.insert(v.end(), value_row.begin(), value_row.end());
      }
    KVArena reference(spec, 1, 3);
    write_kv(reference.layer(0), k.data(), v.data(), slots.data(), tokens, KernelIsa::kScalar);
    const size_t bytes = reference.layer(0).slot_bytes() * static_cast<size_t>(tokens);  // slots 0..tokens-1
    for (KernelIsa isa : builds_to_compare()) {
      KVArena arena(spec, 1, 3);
      write_kv(arena.layer(0), k.data(), v.data(), slots.data(), tokens, isa);
      EXPECT_EQ(std::memcmp(arena.layer(0).key, reference.layer(0).key, bytes), 0)
          << isa_name(isa) << ", keys of " << heads << " x " << dim;
      EXPECT_EQ(std::memcmp(arena.layer(0).value, reference.layer(0).value, bytes), 0)
          << isa_name(isa) << ", values of " << heads << " x " << dim;
    }
  }
}

}  // namespace
}  // namespace pagedkv
