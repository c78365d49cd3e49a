// The host tier: a second KV arena in host DRAM (`host_cache_bytes`), with the device arena's
// page layout so block runs copy with one memcpy per plane, and its own slot index (empty slots,
// an LRU of cached blocks, pins for blocks in flight or held by swapped-out requests).
#pragma once

#include <optional>

#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/tiers/slot_index.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

class HostTier final : public KVTier {
 public:
  // `spec` and `num_layers` are the device arena's; throws ConfigError if num_slots < 1.
  HostTier(const KVCacheSpec& spec, int num_layers, int num_slots);

  KVArena& arena() { return arena_; }
  const KVArena& arena() const { return arena_; }
  SlotIndex& slots() { return slots_; }
  const SlotIndex& slots() const { return slots_; }
  TierStats& mutable_stats() { return stats_; }

  TierKind kind() const override { return TierKind::kHost; }
  int capacity_blocks() const override { return slots_.num_slots(); }
  int num_cached_blocks() const override { return slots_.num_cached(); }
  std::optional<int32_t> find(const BlockContentKey& key) const override { return slots_.find(key); }
  const TierStats& stats() const override { return stats_; }
  void check_invariants() const override { slots_.check_invariants(); }

 private:
  KVArena arena_;
  SlotIndex slots_;
  TierStats stats_;
};

// The primary arena seen as a tier: its lookups are the block pool's prefix cache.
class DeviceTier final : public KVTier {
 public:
  explicit DeviceTier(const BlockPool& pool) : pool_(pool) {}
  TierKind kind() const override { return TierKind::kDevice; }
  int capacity_blocks() const override { return pool_.num_usable_blocks(); }
  int num_cached_blocks() const override { return pool_.num_cached_blocks(); }
  std::optional<int32_t> find(const BlockContentKey& key) const override {
    auto b = pool_.find_cached(key);
    return b ? std::optional<int32_t>(b->value) : std::nullopt;
  }
  const TierStats& stats() const override { return stats_; }
  void check_invariants() const override { pool_.check_invariants(); }

 private:
  const BlockPool& pool_;
  TierStats stats_;
};

}  // namespace pagedkv
