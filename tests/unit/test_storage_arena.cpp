// The KV arena, the worker block table, slot mapping and the KV operations: layout and
// alignment, write/gather round trips with type conversion, copy-on-write and arena-to-arena
// copies checked byte for byte (and that nothing else changed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "storage_test_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/storage/block_table.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/storage/kv_ops.h"

namespace pagedkv {
namespace {

std::vector<uint8_t> snapshot(const KVArena& arena) {
  const auto* p = static_cast<const uint8_t*>(arena.data());
  return {p, p + arena.bytes()};
}

// Fills every byte of the arena with random data.
void randomize(KVArena& arena, std::mt19937_64& rng) {
  auto* p = static_cast<uint8_t*>(arena.data());
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < arena.bytes(); ++i) p[i] = static_cast<uint8_t>(byte(rng));
}

TEST(StorageArena, LayoutIsContiguousAlignedAndPerLayer) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    // head_dim 5 makes a plane a size that is not a multiple of 64 bytes.
    const KVCacheSpec spec = testing::kv_spec(dtype, 3, 2, 5);
    KVArena arena(spec, 4, 7);
    EXPECT_EQ(arena.num_layers(), 4);
    EXPECT_EQ(arena.num_blocks(), 7);
    EXPECT_EQ(arena.bytes_per_block(), spec.bytes_per_block_per_layer() * 4);
    const size_t plane = 7 * 3 * 2 * 5 * dtype_bytes(dtype, 1);
    const auto* base = static_cast<const std::byte*>(arena.data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 64, 0u);
    for (int l = 0; l < 4; ++l) {
      const KVLayerView v = arena.layer(l);
      EXPECT_EQ(v.dtype, dtype);
      EXPECT_EQ(v.num_blocks, 7);
      EXPECT_EQ(v.block_size, 3);
      EXPECT_EQ(v.num_kv_heads, 2);
      EXPECT_EQ(v.head_dim, 5);
      EXPECT_EQ(v.token_stride_elems(), 10u);
      EXPECT_EQ(v.block_stride_elems(), 30u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.key) % 64, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.value) % 64, 0u);
      // K then V, layer after layer, each plane large enough and inside the allocation.
      const auto* k = static_cast<const std::byte*>(v.key);
      const auto* val = static_cast<const std::byte*>(v.value);
      EXPECT_GE(static_cast<size_t>(val - k), plane);
      EXPECT_LE(static_cast<size_t>(val - base) + plane, arena.bytes());
      if (l > 0) {
        EXPECT_GE(static_cast<const std::byte*>(v.key) - static_cast<const std::byte*>(arena.layer(l - 1).value),
                  static_cast<std::ptrdiff_t>(plane));
      }
    }
    // Fresh arenas are zero.
    const auto bytes = snapshot(arena);
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; }));
  }
}

TEST(StorageArena, FillNanPoisonsEveryElement) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    KVArena arena(testing::kv_spec(dtype, 4, 2, 8), 2, 5);
    arena.fill_nan();
    for (int l = 0; l < 2; ++l) {
      const KVLayerView v = arena.layer(l);
      const size_t n = v.num_slots() * v.token_stride_elems();
      std::vector<float> k(n), val(n);
      convert_to_f32(dtype, v.key, k.data(), n);
      convert_to_f32(dtype, v.value, val.data(), n);
      EXPECT_TRUE(std::all_of(k.begin(), k.end(), [](float x) { return std::isnan(x); }));
      EXPECT_TRUE(std::all_of(val.begin(), val.end(), [](float x) { return std::isnan(x); }));
    }
  }
}

TEST(StorageArena, RejectsBadConfiguration) {
  EXPECT_THROW(KVArena(testing::kv_spec(DType::kInt4, 16, 1, 8), 1, 4), ConfigError);
  EXPECT_THROW(KVArena(testing::kv_spec(DType::kF16, 16, 1, 8), 0, 4), ConfigError);
  EXPECT_THROW(KVArena(testing::kv_spec(DType::kF16, 16, 1, 8), 1, 0), ConfigError);
  EXPECT_THROW(KVArena(testing::kv_spec(DType::kF16, 0, 1, 8), 1, 4), ConfigError);
  KVArena arena(testing::kv_spec(DType::kF16, 16, 1, 8), 2, 4);
  EXPECT_THROW((void)arena.layer(2), UsageError);
  EXPECT_THROW((void)arena.layer(-1), UsageError);
}

TEST(StorageBlockTable, RowsGrowIncrementallyAndMove) {
  BlockTable table(3, 4);
  EXPECT_EQ(table.stride(), 4);
  EXPECT_EQ(table.max_requests(), 3);
  const std::vector<BlockId> a{BlockId(5), BlockId(9)};
  table.append_row(0, a);
  table.append_row(0, std::vector<BlockId>{BlockId(2)});
  EXPECT_EQ(table.num_blocks(0), 3);
  EXPECT_EQ(std::vector<int32_t>(table.row(0), table.row(0) + 4), (std::vector<int32_t>{5, 9, 2, 0}));
  EXPECT_THROW(table.append_row(0, a), UsageError);  // 5 > 4
  EXPECT_EQ(table.num_blocks(0), 3) << "a failed append changes nothing";

  table.set_entry(0, 1, BlockId(7));
  EXPECT_EQ(table.row(0)[1], 7);
  EXPECT_THROW(table.set_entry(0, 3, BlockId(1)), UsageError);

  table.set_row(1, std::vector<BlockId>{BlockId(4)});
  table.move_row(0, 2);
  EXPECT_EQ(table.num_blocks(0), 0);
  EXPECT_EQ(table.num_blocks(2), 3);
  EXPECT_EQ(std::vector<int32_t>(table.row(2), table.row(2) + 4), (std::vector<int32_t>{5, 7, 2, 0}));
  EXPECT_EQ(std::vector<int32_t>(table.row(0), table.row(0) + 4), (std::vector<int32_t>{0, 0, 0, 0}));

  table.swap_rows(1, 2);
  EXPECT_EQ(table.num_blocks(1), 3);
  EXPECT_EQ(table.num_blocks(2), 1);
  EXPECT_EQ(table.row(2)[0], 4);
  EXPECT_EQ(table.data() + 4, table.row(1)) << "rows are dense with stride max_blocks_per_request";

  table.clear_row(1);
  EXPECT_EQ(table.num_blocks(1), 0);
  EXPECT_EQ(table.row(1)[0], 0);
  EXPECT_THROW((void)table.row(3), UsageError);
  EXPECT_THROW(BlockTable(0, 4), ConfigError);
}

TEST(StorageBlockTable, SlotMapping) {
  const std::vector<int32_t> row{7, 3, 11};
  std::vector<int64_t> slots(6);
  compute_slot_mapping(row.data(), 4, 2, 6, slots.data());
  EXPECT_EQ(slots, (std::vector<int64_t>{30, 31, 12, 13, 14, 15}));
  compute_slot_mapping(row.data(), 4, 8, 1, slots.data());
  EXPECT_EQ(slots[0], 44);
  compute_slot_mapping(row.data(), 1, 1, 2, slots.data());
  EXPECT_EQ(slots[0], 3);
  EXPECT_EQ(slots[1], 11);
}

TEST(StorageKVOps, WriteThenGatherRoundTripsWithRounding) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int block_size = 4, heads = 3, dim = 16, tokens = 11;
    KVArena arena(testing::kv_spec(dtype, block_size, heads, dim), 2, 9);
    arena.fill_nan();
    const std::vector<int32_t> row{6, 2, 8};
    const size_t n = static_cast<size_t>(tokens) * heads * dim;
    std::vector<float> k(n), v(n);
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    std::vector<int64_t> slots(tokens);
    compute_slot_mapping(row.data(), block_size, 0, tokens, slots.data());
    slots[5] = -1;  // a padding token is skipped
    const KVLayerView layer = arena.layer(1);
    write_kv(layer, k.data(), v.data(), slots.data(), tokens);

    std::vector<float> k_out(n), v_out(n);
    gather_kv(layer, row.data(), tokens, k_out.data(), v_out.data());
    for (size_t i = 0; i < n; ++i) {
      const size_t token = i / (heads * dim);
      if (token == 5) {
        EXPECT_TRUE(std::isnan(k_out[i]) && std::isnan(v_out[i])) << "padding slot must stay untouched";
        continue;
      }
      float ek = k[i], ev = v[i];
      if (dtype == DType::kF16) ek = f16_to_f32(f32_to_f16(ek)), ev = f16_to_f32(f32_to_f16(ev));
      if (dtype == DType::kBF16) ek = bf16_to_f32(f32_to_bf16(ek)), ev = bf16_to_f32(f32_to_bf16(ev));
      ASSERT_EQ(k_out[i], ek) << dtype_name(dtype) << " element " << i;
      ASSERT_EQ(v_out[i], ev) << dtype_name(dtype) << " element " << i;
    }
    // Layer 0 was not touched; neither were the slots past the written tokens.
    std::vector<float> l0k(n), l0v(n);
    gather_kv(arena.layer(0), row.data(), tokens, l0k.data(), l0v.data());
    EXPECT_TRUE(std::all_of(l0k.begin(), l0k.end(), [](float x) { return std::isnan(x); }));
    const int64_t bad = static_cast<int64_t>(9 * block_size);
    EXPECT_THROW(write_kv(layer, k.data(), v.data(), &bad, 1), UsageError);
  }
}

TEST(StorageKVOps, CopyBlocksIsByteExactAndTouchesOnlyDestinations) {
  std::mt19937_64 rng(std::random_device{}());
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    KVArena arena(testing::kv_spec(dtype, 16, 2, 24), 3, 10);
    randomize(arena, rng);
    const auto before = snapshot(arena);
    const std::vector<std::pair<BlockId, BlockId>> pairs{
        {BlockId(1), BlockId(4)}, {BlockId(7), BlockId(2)}, {BlockId(1), BlockId(9)}, {BlockId(3), BlockId(3)}};
    copy_blocks(arena, pairs);
    const auto after = snapshot(arena);
    // Expected: the old bytes with each destination block replaced by its source's, per plane.
    std::vector<uint8_t> expected = before;
    const auto* base = static_cast<const uint8_t*>(arena.data());
    for (int l = 0; l < arena.num_layers(); ++l) {
      const KVLayerView layer = arena.layer(l);
      for (const void* plane : {layer.key, layer.value}) {
        const size_t plane_off = static_cast<size_t>(static_cast<const uint8_t*>(plane) - base);
        const size_t bb = layer.block_bytes();
        for (const auto& [s, d] : pairs)
          std::memcpy(expected.data() + plane_off + static_cast<size_t>(d.value) * bb,
                      before.data() + plane_off + static_cast<size_t>(s.value) * bb, bb);
      }
    }
    EXPECT_TRUE(after == expected) << dtype_name(dtype);
    EXPECT_THROW(copy_blocks(arena, std::vector<std::pair<BlockId, BlockId>>{{BlockId(0), BlockId(10)}}), UsageError);
  }
}

TEST(StorageKVOps, CopyBetweenArenasIsByteExact) {
  std::mt19937_64 rng(std::random_device{}());
  const KVCacheSpec spec = testing::kv_spec(DType::kBF16, 8, 4, 32);
  KVArena device(spec, 2, 12);
  KVArena host(spec, 2, 5);  // a smaller pool, as an offload tier would be
  randomize(device, rng);
  randomize(host, rng);
  const auto device_before = snapshot(device);
  const auto host_before = snapshot(host);
  const std::vector<std::pair<BlockId, BlockId>> out{{BlockId(11), BlockId(0)}, {BlockId(3), BlockId(4)}};
  copy_blocks_between(device, host, out);
  EXPECT_TRUE(snapshot(device) == device_before) << "the source arena is not modified";
  for (int l = 0; l < 2; ++l) {
    const KVLayerView from = device.layer(l), to = host.layer(l);
    const size_t bb = from.block_bytes();
    for (const auto& [s, d] : out) {
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(to.key) + static_cast<size_t>(d.value) * bb,
                            static_cast<const uint8_t*>(from.key) + static_cast<size_t>(s.value) * bb, bb),
                0);
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(to.value) + static_cast<size_t>(d.value) * bb,
                            static_cast<const uint8_t*>(from.value) + static_cast<size_t>(s.value) * bb, bb),
                0);
    }
    // Blocks 1..3 of the host arena are untouched.
    const auto* host_base = static_cast<const uint8_t*>(host.data());
    const size_t off = static_cast<size_t>(static_cast<const uint8_t*>(to.key) - host_base) + bb;
    EXPECT_EQ(std::memcmp(host_base + off, host_before.data() + off, 3 * bb), 0);
  }
  // And back again (swap-in): host[4] -> device[7] equals the original device[3].
  copy_blocks_between(host, device, std::vector<std::pair<BlockId, BlockId>>{{BlockId(4), BlockId(7)}});
  const KVLayerView d1 = device.layer(1);
  const size_t bb = d1.block_bytes();
  const size_t key_off =
      static_cast<size_t>(static_cast<const uint8_t*>(d1.key) - static_cast<const uint8_t*>(device.data()));
  EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(d1.key) + 7 * bb, device_before.data() + key_off + 3 * bb, bb), 0);

  KVArena other(testing::kv_spec(DType::kF16, 8, 4, 32), 2, 5);
  EXPECT_THROW(copy_blocks_between(device, other, out), UsageError);
  EXPECT_THROW(copy_blocks_between(device, host, std::vector<std::pair<BlockId, BlockId>>{{BlockId(0), BlockId(5)}}),
               UsageError);
}

}  // namespace
}  // namespace pagedkv
