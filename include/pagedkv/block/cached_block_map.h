// The prefix cache's index: block hash -> the first cached block with that hash. Further blocks
// with an equal hash (same content cached twice, or a collision) chain through
// KVCacheBlock::next_same_hash, oldest first, so a lookup takes the earliest cached one.
// Open addressing with linear probing and backward-shift deletion over a table sized once for
// the pool: no allocation after construction, no tombstones.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagedkv/block/kv_cache_block.h"
#include "pagedkv/core/block_hash.h"

namespace pagedkv {

class CachedBlockMap {
 public:
  // Sized for at most `max_entries` keys (at most one per physical block).
  explicit CachedBlockMap(size_t max_entries);

  static constexpr size_t kAbsent = ~size_t{0};

  // The head block id for `key`, or -1.
  int32_t find(const BlockHash& key) const {
    const size_t slot = find_slot(key);
    return slot == kAbsent ? -1 : slots_[slot].value;
  }
  // Sets the head for `key` (inserting it if absent).
  void assign(const BlockHash& key, int32_t head);
  // Removes `key` (no-op when absent).
  void erase(const BlockHash& key);

  // In one probe: the head for `key` if present; else inserts `head` for it and returns -1.
  int32_t find_or_insert(const BlockHash& key, int32_t head) {
    Slot& s = probe(key);
    if (s.value >= 0) return s.value;
    s.key = key;
    s.value = head;
    ++size_;
    return -1;
  }
  // Slot-level access, so that a find followed by a change probes once. A slot index is valid
  // until the next insertion or erase.
  size_t find_slot(const BlockHash& key) const {
    for (size_t i = bucket(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value < 0) return kAbsent;
      if (s.key == key) return i;
    }
  }
  // Starts loading `key`'s home slot (a caller walking a run of hashes asks one ahead).
  void prefetch(const BlockHash& key) const { __builtin_prefetch(&slots_[bucket(key)]); }
  int32_t head_at(size_t slot) const { return slots_[slot].value; }
  void set_head_at(size_t slot, int32_t head) { slots_[slot].value = head; }
  void erase_at(size_t slot);
  size_t size() const { return size_; }
  void clear();

  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.value >= 0) f(s.key, s.value);
  }

 private:
  struct Slot {
    BlockHash key;
    int32_t value = -1;  // -1: empty
  };
  size_t bucket(const BlockHash& key) const {
    // The hash is already uniformly mixed; fold both halves for short tables.
    return static_cast<size_t>(key.lo ^ (key.hi >> 7)) & mask_;
  }
  // The slot holding `key`, or the empty slot where it belongs (the table is never full).
  Slot& probe(const BlockHash& key) {
    for (size_t i = bucket(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value < 0 || s.key == key) return s;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Removes `b` from the chain of blocks cached under `key` (`map` holds the chain's head, the rest
// link through KVCacheBlock::next_same_hash over `blocks`) and clears its link. Returns true when
// `b` was the only block under `key`; throws InvariantError when it is not in the chain.
bool unlink_cached_block(CachedBlockMap& map, std::span<KVCacheBlock> blocks, const BlockHash& key, KVCacheBlock& b);

}  // namespace pagedkv
