// The metadata of a lower tier's fixed set of block slots (the host tier's arena, the disk tier's
// file). Every slot is in exactly one state:
//   empty   holds nothing; handed out first;
//   cached  holds a block findable by its content key; when unpinned it sits in the LRU list and
//           may be evicted to make room (the eviction callback sees its key first);
//   pinned  ref > 0: in flight (being written or read) or holding a swapped-out request's block;
//           never evicted. A pinned slot may also be cached (a block being promoted).
// Built from the block layer's parts: the intrusive FreeBlockQueue is the LRU of unpinned cached
// slots and the CachedBlockMap indexes cached slots by hash, so nothing allocates per operation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/block/cached_block_map.h"
#include "pagedkv/block/free_block_queue.h"
#include "pagedkv/block/kv_cache_block.h"
#include "pagedkv/block/kv_events.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

class SlotIndex {
 public:
  SlotIndex(int num_slots, int block_size);  // throws ConfigError unless both are positive
  SlotIndex(const SlotIndex&) = delete;
  SlotIndex& operator=(const SlotIndex&) = delete;

  int num_slots() const { return static_cast<int>(slots_.size()); }
  int block_size() const { return block_size_; }
  int num_empty() const { return num_empty_; }
  int num_cached() const { return num_cached_; }
  int num_pinned() const { return num_pinned_; }
  // Slots allocate() can hand out now: empty ones and unpinned cached ones.
  int num_allocatable() const { return num_empty() + lru_.size(); }

  // Hands out a slot, pinned (ref 1) and uncached: the lowest-numbered empty slot, else the least
  // recently used cached one, which is evicted (`on_evict(slot)` runs first, key still readable).
  // Returns -1 when every slot is pinned.
  int32_t allocate(const std::function<void(int32_t)>& on_evict = {});
  // Takes a specific empty slot (rebuilding an index from disk). False if it is not empty.
  bool claim(int32_t slot);

  // The slot holding exactly `key` (hash, parent, tokens, extra digest, group), or nullopt.
  std::optional<int32_t> find(const BlockContentKey& key) const;
  // Registers pinned, uncached `slot` as holding `key`.
  void cache(int32_t slot, const BlockContentKey& key);
  // Forgets the slot's content (a corrupt block): a pinned slot stays pinned, else it becomes empty.
  void uncache(int32_t slot);
  void pin(int32_t slot);
  // Drops one pin; at zero a cached slot becomes the most recently used, an uncached one empty.
  void unpin(int32_t slot);
  // Moves an unpinned cached slot to the most recently used end (a duplicate store, a hit).
  void touch(int32_t slot);

  int32_t ref(int32_t slot) const { return at(slot).ref_cnt; }
  bool is_cached(int32_t slot) const { return at(slot).has_hash; }
  bool is_empty(int32_t slot) const;
  StoredBlockKey key(int32_t slot) const;  // of a cached slot
  const BlockHash& hash(int32_t slot) const { return at(slot).hash; }

  // Unpinned cached slots, least recently used first.
  template <typename F>
  void for_each_lru(F&& f) const {
    lru_.for_each([&](const KVCacheBlock& b) { f(b.id.value); });
  }
  // Every cached slot, pinned or not, in slot order.
  template <typename F>
  void for_each_cached(F&& f) const {
    for (const KVCacheBlock& b : slots_)
      if (b.has_hash) f(b.id.value);
  }

  // KV events (a block became findable here / stopped being findable), as the block pool records
  // them for the device: off until enabled; the caller drains them.
  void enable_events(Medium medium) {
    events_enabled_ = true;
    medium_ = medium;
  }
  std::vector<KVEvent> take_events() { return std::exchange(events_, {}); }

  // Exactly one state per slot; the LRU holds exactly the unpinned cached slots; the map and the
  // slots' hashes agree; the counters match. Throws InvariantError.
  void check_invariants() const;

 private:
  KVCacheBlock& at(int32_t slot);
  const KVCacheBlock& at(int32_t slot) const;
  BlockHash map_key(const BlockHash& h, uint16_t group) const {
    return BlockHash{h.lo ^ (static_cast<uint64_t>(group) * 0x9E3779B97F4A7C15ull), h.hi};
  }
  bool matches(const KVCacheBlock& b, const BlockContentKey& key) const;
  void drop_key(KVCacheBlock& b);
  void push_empty(int32_t slot);

  int block_size_;
  std::vector<KVCacheBlock> slots_;
  FreeBlockQueue lru_;
  CachedBlockMap map_;
  // Min-heap of empty slots: the lowest first, so a batch of new blocks gets adjacent slots and
  // its writes coalesce. Entries are deleted lazily: one is live only while in_empty_ is set
  // (claim() during an index rebuild is O(1) instead of a heap search).
  std::vector<int32_t> empty_;
  std::vector<uint8_t> in_empty_;
  int num_empty_ = 0;
  std::vector<TokenId> tokens_;  // [num_slots][block_size]
  std::vector<BlockHash> parent_;
  std::vector<uint64_t> extra_digest_;
  int num_cached_ = 0;
  int num_pinned_ = 0;
  bool events_enabled_ = false;
  Medium medium_ = Medium::kHost;
  std::vector<KVEvent> events_;
};

}  // namespace pagedkv
