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

void CachedBlockMap::clear() {
  for (Slot& s : slots_) s.value = -1;
  size_ = 0;
}

void throw_missing_from_hash_chain(int32_t block) {
  throw InvariantError(fmt::format("block {} missing from its hash chain", block));
}

}  // namespace pagedkv
