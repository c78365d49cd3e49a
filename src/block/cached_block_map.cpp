#include "pagedkv/block/cached_block_map.h"

#include <fmt/format.h>

#include <bit>

#include "pagedkv/core/error.h"

namespace pagedkv {

CachedBlockMap::CachedBlockMap(size_t max_entries) {
  // Load factor <= 0.5 keeps probe chains short even when every block is cached.
  size_t capacity = std::bit_ceil(std::max<size_t>(16, 2 * max_entries));
  slots_.resize(capacity);
  mask_ = capacity - 1;
}

void CachedBlockMap::assign(const BlockHash& key, int32_t head) {
  Slot& s = probe(key);
  if (s.value < 0) {
    s.key = key;
    ++size_;
  }
  s.value = head;
}

void CachedBlockMap::erase(const BlockHash& key) {
  const size_t slot = find_slot(key);
  if (slot != kAbsent) erase_at(slot);
}

void CachedBlockMap::erase_at(size_t i) {
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

void CachedBlockMap::clear() {
  for (Slot& s : slots_) s.value = -1;
  size_ = 0;
}

bool unlink_cached_block(CachedBlockMap& map, std::span<KVCacheBlock> blocks, const BlockHash& key, KVCacheBlock& b) {
  const size_t slot = map.find_slot(key);
  const int32_t head = slot == CachedBlockMap::kAbsent ? kNoLink : map.head_at(slot);
  const bool last_copy = head == b.id.value && b.next_same_hash == kNoLink;
  if (head == b.id.value) {
    if (b.next_same_hash == kNoLink) map.erase_at(slot); else map.set_head_at(slot, b.next_same_hash);
  } else {
    int32_t t = head;
    while (t != kNoLink && blocks[static_cast<size_t>(t)].next_same_hash != b.id.value)
      t = blocks[static_cast<size_t>(t)].next_same_hash;
    if (t == kNoLink) throw InvariantError(fmt::format("block {} missing from its hash chain", b.id.value));
    blocks[static_cast<size_t>(t)].next_same_hash = b.next_same_hash;
  }
  b.next_same_hash = kNoLink;
  return last_copy;
}

}  // namespace pagedkv
