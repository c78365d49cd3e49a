#include "pagedkv/tiers/slot_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "pagedkv/core/error.h"

namespace pagedkv {

SlotIndex::SlotIndex(int num_slots, int block_size)
    : block_size_(block_size),
      slots_(static_cast<size_t>(std::max(num_slots, 0))),
      lru_(slots_),
      map_(static_cast<size_t>(std::max(num_slots, 1))),
      in_empty_(static_cast<size_t>(std::max(num_slots, 0)), 0) {
  if (num_slots <= 0) throw ConfigError(fmt::format("a tier needs at least one slot, got {}", num_slots));
  if (block_size <= 0) throw ConfigError(fmt::format("block_size must be positive, got {}", block_size));
  tokens_.resize(slots_.size() * static_cast<size_t>(block_size));
  parent_.resize(slots_.size());
  extra_digest_.resize(slots_.size());
  empty_.reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].id = BlockId{static_cast<int32_t>(i)};
    push_empty(static_cast<int32_t>(i));
  }
}

KVCacheBlock& SlotIndex::at(int32_t slot) {
  if (slot < 0 || slot >= num_slots())
    throw UsageError(fmt::format("tier slot {} out of range [0, {})", slot, num_slots()));
  return slots_[static_cast<size_t>(slot)];
}

const KVCacheBlock& SlotIndex::at(int32_t slot) const {
  if (slot < 0 || slot >= num_slots())
    throw UsageError(fmt::format("tier slot {} out of range [0, {})", slot, num_slots()));
  return slots_[static_cast<size_t>(slot)];
}

bool SlotIndex::is_empty(int32_t slot) const {
  const KVCacheBlock& b = at(slot);
  return b.ref_cnt == 0 && !b.has_hash;
}

void SlotIndex::push_empty(int32_t slot) {
  empty_.push_back(slot);
  std::push_heap(empty_.begin(), empty_.end(), std::greater<>{});
  in_empty_[static_cast<size_t>(slot)] = 1;
  ++num_empty_;
}

int32_t SlotIndex::allocate(const std::function<void(int32_t)>& on_evict) {
  int32_t slot = -1;
  while (slot < 0 && !empty_.empty()) {
    std::pop_heap(empty_.begin(), empty_.end(), std::greater<>{});
    const int32_t candidate = empty_.back();
    empty_.pop_back();
    if (!in_empty_[static_cast<size_t>(candidate)]) continue;  // a stale entry (claimed)
    slot = candidate;
    in_empty_[static_cast<size_t>(slot)] = 0;
    --num_empty_;
  }
  if (slot < 0) {
    if (lru_.empty()) return -1;
    KVCacheBlock& victim = lru_.pop_front();
    slot = victim.id.value;
    if (on_evict) on_evict(slot);
    drop_key(victim);
  }
  KVCacheBlock& b = slots_[static_cast<size_t>(slot)];
  b.ref_cnt = 1;
  ++num_pinned_;
  return slot;
}

bool SlotIndex::claim(int32_t slot) {
  at(slot);
  if (!in_empty_[static_cast<size_t>(slot)]) return false;
  in_empty_[static_cast<size_t>(slot)] = 0;  // its heap entry goes stale
  --num_empty_;
  slots_[static_cast<size_t>(slot)].ref_cnt = 1;
  ++num_pinned_;
  return true;
}

bool SlotIndex::matches(const KVCacheBlock& b, const BlockContentKey& key) const {
  if (b.group != key.group || b.hash != key.hash) return false;
  const size_t i = static_cast<size_t>(b.id.value);
  if (parent_[i] != key.parent || extra_digest_[i] != key.extra_digest) return false;
  if (key.tokens.size() != static_cast<size_t>(block_size_)) return false;
  return std::equal(key.tokens.begin(), key.tokens.end(),
                    tokens_.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(block_size_)));
}

std::optional<int32_t> SlotIndex::find(const BlockContentKey& key) const {
  for (int32_t i = map_.find(map_key(key.hash, key.group)); i != kNoLink;
       i = slots_[static_cast<size_t>(i)].next_same_hash)
    if (matches(slots_[static_cast<size_t>(i)], key)) return i;
  return std::nullopt;
}

void SlotIndex::cache(int32_t slot, const BlockContentKey& key) {
  KVCacheBlock& b = at(slot);
  if (b.ref_cnt <= 0) throw UsageError(fmt::format("tier slot {}: only a pinned slot can be filled", slot));
  if (b.has_hash) throw UsageError(fmt::format("tier slot {} already holds block {}", slot, b.hash.hex()));
  if (key.tokens.size() != static_cast<size_t>(block_size_))
    throw UsageError(fmt::format("tier slot {}: a block has {} tokens, got {}", slot, block_size_, key.tokens.size()));
  const size_t i = static_cast<size_t>(slot);
  std::copy(key.tokens.begin(), key.tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(block_size_)));
  parent_[i] = key.parent;
  extra_digest_[i] = key.extra_digest;
  b.hash = key.hash;
  b.group = key.group;
  b.has_hash = true;
  b.num_tokens = block_size_;
  b.next_same_hash = kNoLink;
  const BlockHash mk = map_key(key.hash, key.group);
  const int32_t head = map_.find(mk);
  if (head == kNoLink) {
    map_.assign(mk, slot);
  } else {
    int32_t t = head;
    while (slots_[static_cast<size_t>(t)].next_same_hash != kNoLink) t = slots_[static_cast<size_t>(t)].next_same_hash;
    slots_[static_cast<size_t>(t)].next_same_hash = slot;
  }
  ++num_cached_;
  if (events_enabled_) {
    KVEvent e;
    e.kind = KVEventKind::kBlockStored;
    e.hash = key.hash;
    e.parent_hash = key.parent;
    e.token_count = block_size_;
    e.block = BlockId{slot};
    e.group = key.group;
    e.medium = medium_;
    events_.push_back(e);
  }
}

void SlotIndex::drop_key(KVCacheBlock& b) {
  unlink_cached_block(map_, slots_, map_key(b.hash, b.group), b);
  if (events_enabled_) {
    KVEvent e;
    e.kind = KVEventKind::kBlockRemoved;
    e.hash = b.hash;
    e.block = b.id;
    e.group = b.group;
    e.reason = RemovalReason::kEvicted;
    e.medium = medium_;
    events_.push_back(e);
  }
  b.has_hash = false;
  b.hash = BlockHash{};
  b.num_tokens = 0;
  --num_cached_;
}

void SlotIndex::uncache(int32_t slot) {
  KVCacheBlock& b = at(slot);
  if (!b.has_hash) return;
  if (b.ref_cnt == 0) lru_.remove(b);
  drop_key(b);
  if (b.ref_cnt == 0) push_empty(slot);
}

void SlotIndex::pin(int32_t slot) {
  KVCacheBlock& b = at(slot);
  if (b.ref_cnt == 0) {
    if (!b.has_hash) throw UsageError(fmt::format("tier slot {} is empty: nothing to pin", slot));
    lru_.remove(b);
    ++num_pinned_;
  }
  ++b.ref_cnt;
}

void SlotIndex::unpin(int32_t slot) {
  KVCacheBlock& b = at(slot);
  if (b.ref_cnt <= 0) throw UsageError(fmt::format("tier slot {} is not pinned", slot));
  if (--b.ref_cnt > 0) return;
  --num_pinned_;
  if (b.has_hash) lru_.push_back(b);
  else push_empty(slot);
}

void SlotIndex::touch(int32_t slot) {
  KVCacheBlock& b = at(slot);
  if (b.ref_cnt > 0 || !b.has_hash) return;
  lru_.remove(b);
  lru_.push_back(b);
}

StoredBlockKey SlotIndex::key(int32_t slot) const {
  const KVCacheBlock& b = at(slot);
  if (!b.has_hash) throw UsageError(fmt::format("tier slot {} holds no block", slot));
  const size_t i = static_cast<size_t>(slot);
  StoredBlockKey k;
  k.hash = b.hash;
  k.parent = parent_[i];
  k.extra_digest = extra_digest_[i];
  k.group = b.group;
  auto first = tokens_.begin() + static_cast<ptrdiff_t>(i * static_cast<size_t>(block_size_));
  k.tokens.assign(first, first + block_size_);
  return k;
}

void SlotIndex::check_invariants() const {
  auto fail = [](const std::string& msg) { throw InvariantError("tier slots: " + msg); };
  std::vector<uint8_t> in_lru(slots_.size(), 0);
  int lru_count = 0;
  lru_.for_each([&](const KVCacheBlock& b) {
    const size_t i = static_cast<size_t>(b.id.value);
    if (in_lru[i]) fail(fmt::format("slot {} is twice in the LRU list", i));
    in_lru[i] = 1;
    ++lru_count;
  });
  if (lru_count != lru_.size()) fail(fmt::format("LRU size {} but {} slots linked", lru_.size(), lru_count));
  int cached = 0, pinned = 0;
  for (const KVCacheBlock& b : slots_) {
    const size_t i = static_cast<size_t>(b.id.value);
    const bool empty = in_empty_[i] != 0;
    const bool lru = in_lru[i] != 0;
    const bool pin = b.ref_cnt > 0;
    if (b.ref_cnt < 0) fail(fmt::format("slot {} has ref {}", i, b.ref_cnt));
    // Exactly one place: the empty heap, the LRU list, or pinned.
    if (static_cast<int>(empty) + static_cast<int>(lru) + static_cast<int>(pin) != 1)
      fail(fmt::format("slot {} is in {} places (empty {}, lru {}, pinned {})", i,
                       static_cast<int>(empty) + static_cast<int>(lru) + static_cast<int>(pin), empty, lru, pin));
    if (empty && b.has_hash) fail(fmt::format("empty slot {} holds a block", i));
    if (lru && !b.has_hash) fail(fmt::format("slot {} is in the LRU list without a block", i));
    if (lru != b.in_free_queue) fail(fmt::format("slot {} LRU flag disagrees with the list", i));
    if (pin) ++pinned;
    if (!b.has_hash) continue;
    ++cached;
    bool found = false;
    for (int32_t j = map_.find(map_key(b.hash, b.group)); j != kNoLink;
         j = slots_[static_cast<size_t>(j)].next_same_hash)
      if (j == b.id.value) found = true;
    if (!found) fail(fmt::format("cached slot {} is not in the index", i));
  }
  if (cached != num_cached_) fail(fmt::format("{} slots hold blocks but the count says {}", cached, num_cached_));
  if (pinned != num_pinned_) fail(fmt::format("{} slots are pinned but the count says {}", pinned, num_pinned_));
  if (std::count(in_empty_.begin(), in_empty_.end(), 1) != num_empty_) fail("the empty count and the flags disagree");
  std::vector<uint8_t> in_heap(slots_.size(), 0);
  for (int32_t e : empty_) in_heap[static_cast<size_t>(e)] = 1;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (in_empty_[i] && !in_heap[i]) fail(fmt::format("empty slot {} is missing from the heap", i));
  size_t chained = 0;
  map_.for_each([&](const BlockHash&, int32_t head) {
    for (int32_t j = head; j != kNoLink; j = slots_[static_cast<size_t>(j)].next_same_hash)
      if (++chained > slots_.size()) fail("index chains have a cycle");
  });
  if (chained != static_cast<size_t>(num_cached_)) fail("index chains do not cover exactly the cached slots");
}

}  // namespace pagedkv
