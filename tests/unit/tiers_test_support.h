// Shared helpers of the tier tests (test_tiers_*.cpp): a small manager + device arena pair, block
// bytes that are a pure function of the block's content key (so a test can tell, byte for byte,
// that a block came back from a lower tier intact), and temporary cache directories.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/manager/kv_cache_manager.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/tiers/block_copy.h"
#include "pagedkv/tiers/disk_tier.h"
#include "pagedkv/tiers/transfer_engine.h"
#include "pagedkv/tiers/tiered_kv_cache.h"

namespace pagedkv::testing {

inline KVCacheSpec small_spec(int block_size = 4) {
  KVCacheSpec s;
  s.block_size = block_size;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.dtype = DType::kF32;
  return s;
}
inline constexpr int kLayers = 2;

inline KVCacheManagerConfig manager_config(int num_blocks, int block_size = 4) {
  KVCacheManagerConfig c;
  c.cache.num_blocks = num_blocks;
  c.cache.groups.push_back(KVCacheGroupSpec{small_spec(block_size), kLayers});
  c.watermark = 0.0;
  return c;
}

// A device: the manager's pool and the arena holding its bytes.
struct Device {
  KVCacheManager manager;
  KVArena arena;
  explicit Device(int num_blocks, int block_size = 4)
      : manager(manager_config(num_blocks, block_size)), arena(small_spec(block_size), kLayers, num_blocks) {}
  // A manager configured by the caller (e.g. a colliding hash function), same pool size.
  Device(KVCacheManagerConfig config, int block_size)
      : manager(std::move(config)), arena(small_spec(block_size), kLayers, manager.pool().num_blocks()) {}
};

// The payload a block with hash `h` holds in these tests.
inline std::vector<std::byte> payload_for(const BlockHash& h, size_t bytes) {
  std::vector<std::byte> p(bytes);
  uint64_t x = h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<std::byte>(x >> 56);
  }
  return p;
}

inline void fill_block(KVArena& arena, BlockId b, const BlockHash& h) {
  const auto p = payload_for(h, block_payload_bytes(arena));
  scatter_block(p.data(), arena, b.value);
}

inline bool block_holds(const KVArena& arena, BlockId b, const BlockHash& h) {
  std::vector<std::byte> got(block_payload_bytes(arena));
  gather_block(arena, b.value, got.data());
  return got == payload_for(h, got.size());
}

inline Request make_request(uint64_t id, int num_tokens, TokenId first) {
  std::vector<TokenId> t(static_cast<size_t>(num_tokens));
  for (int i = 0; i < num_tokens; ++i) t[static_cast<size_t>(i)] = first + i;
  return Request(RequestId{id}, std::move(t));
}

// Admits `r` with its prefix hits, "computes" every full block (writes its pattern), runs the
// request to its end and frees it: its full blocks stay cached on the device. With tiers, the
// pending copies run first, as the engine runs them before its forward pass.
inline void compute_and_free(Device& d, Request& r, TieredKVCache* tiers = nullptr) {
  ComputedBlocks hits = d.manager.get_computed_blocks(r);
  auto nb = d.manager.allocate_slots(r, r.num_tokens() - hits.num_computed_tokens, hits.num_computed_tokens, &hits);
  ASSERT_TRUE(nb.has_value()) << "pool too small for request " << r.id.value;
  if (tiers) tiers->before_forward();
  const auto table = d.manager.get_block_ids(r);
  for (size_t i = 0; i < r.block_hashes.size() && i < table.size(); ++i)
    if (i >= static_cast<size_t>(hits.num_computed_tokens / d.manager.block_size()))
      fill_block(d.arena, table[i], r.block_hashes[i]);
  r.num_computed_tokens = r.num_tokens();
  d.manager.free(r);
}

// Waits (polling, as the scheduler does between steps) until the request's prefix is ready.
inline TieredKVCache::PrefixState wait_ready(TieredKVCache& tiers, Request& r) {
  for (int i = 0; i < 5000; ++i) {
    if (tiers.prepare_prefix(r) == TieredKVCache::PrefixState::kReady) return TieredKVCache::PrefixState::kReady;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return TieredKVCache::PrefixState::kLoading;
}

// One read per cached slot of `disk`, in slot order, into device blocks 0, 1, ..., each expecting
// the key its slot is indexed under.
inline TransferBatch read_every_cached_slot(const DiskTier& disk) {
  TransferBatch b;
  int next = 0;
  disk.slots().for_each_cached([&](int32_t slot) {
    DiskRead r;
    r.slot = slot;
    r.device_block = next++;
    r.expected = disk.slots().key(slot);
    b.disk_reads.push_back(std::move(r));
  });
  return b;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pagedkv-tiers-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

inline void check_all(const Device& d, const TieredKVCache& t) {
  d.manager.check_invariants();
  t.check_invariants();
}

// Admits `r` after its tier lookup, checks every hit block holds its pattern, computes the rest
// and frees it; returns the hit tokens by tier. `write_through`: also run the step-begin hook
// that hands newly cached blocks to write-through tiers (the remote tier's tests).
inline TierHitTokens admit_and_verify(Device& d, TieredKVCache& t, Request& r, bool write_through = false) {
  EXPECT_EQ(wait_ready(t, r), TieredKVCache::PrefixState::kReady);
  check_all(d, t);
  ComputedBlocks hits = d.manager.get_computed_blocks(r);
  for (size_t i = 0; i < hits.blocks[0].size(); ++i)
    EXPECT_TRUE(block_holds(d.arena, hits.blocks[0][i], r.block_hashes[i])) << "block " << i;
  const TierHitTokens tiers = t.take_hit_tokens(r, hits.num_computed_tokens);
  compute_and_free(d, r, &t);
  if (write_through) t.on_step_begin();
  t.before_forward();
  check_all(d, t);
  return tiers;
}

// True once `p()` holds, polling every millisecond for at most `limit` (the tiers' lanes work
// on their own threads: a test waits for them, boundedly).
template <typename Pred>
bool eventually(Pred p, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return p();
}

}  // namespace pagedkv::testing
