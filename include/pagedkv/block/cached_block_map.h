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

[[noreturn, gnu::cold]] void throw_missing_from_hash_chain(int32_t block);

// Inline, like unlink_cached_block below: a block's eviction runs through both (and they are short).
inline void CachedBlockMap::erase_at(size_t i) {
  // Backward-shift: pull later entries of the probe run into the hole when their home bucket
  // does not lie strictly between the hole and their current slot.
  size_t hole = i;
  for (size_t j = (hole + 1) & mask_; slots_[j].value >= 0; j = (j + 1) & mask_) {
    size_t home = bucket(slots_[j].key);
    bool movable = (j > hole) ? (home <= hole || home > j) : (home <= hole && home > j);
    if (movable) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole].value = -1;
  --size_;
}

// Removes `b` from the chain of blocks cached under `key` (`map` holds the chain's head, the rest
// link through KVCacheBlock::next_same_hash over `blocks`) and clears its link. Returns true when
// `b` was the only block under `key`; throws InvariantError when it is not in the chain.
inline bool unlink_cached_block(CachedBlockMap& map, std::span<KVCacheBlock> blocks, const BlockHash& key,
                                KVCacheBlock& b) {
  const size_t slot = map.find_slot(key);
  const int32_t head = slot == CachedBlockMap::kAbsent ? kNoLink : map.head_at(slot);
  const bool last_copy = head == b.id.value && b.next_same_hash == kNoLink;
  if (head == b.id.value) {
    if (b.next_same_hash == kNoLink) map.erase_at(slot);
    else map.set_head_at(slot, b.next_same_hash);
  } else {
    int32_t t = head;
    while (t != kNoLink && blocks[static_cast<size_t>(t)].next_same_hash != b.id.value)
      t = blocks[static_cast<size_t>(t)].next_same_hash;
    if (t == kNoLink) throw_missing_from_hash_chain(b.id.value);
    blocks[static_cast<size_t>(t)].next_same_hash = b.next_same_hash;
  }
  b.next_same_hash = kNoLink;
  return last_copy;
}

}  // namespace pagedkv
