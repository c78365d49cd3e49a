#include "pagedkv/block/block_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "pagedkv/core/error.h"

namespace pagedkv {

BlockPool::BlockPool(BlockPoolOptions options)
    : block_size_(options.block_size),
      enable_caching_(options.enable_caching),
      enable_events_(options.enable_events),
      blocks_(static_cast<size_t>(std::max(options.num_blocks, 0))),
      free_queue_(blocks_),
      policy_(std::move(options.policy)),
      group_specs_(std::move(options.group_specs)),
      cache_map_(static_cast<size_t>(std::max(options.num_blocks, 0))) {
  if (options.num_blocks < 2)
    throw ConfigError(fmt::format("a block pool needs at least 2 blocks (block 0 is the reserved null block), got {}",
                                  options.num_blocks));
  if (block_size_ <= 0) throw ConfigError(fmt::format("block_size must be positive, got {}", block_size_));
  for (const KVCacheSpec& g : group_specs_)
    if (g.block_size <= 0 || g.block_size > block_size_)
      throw ConfigError(fmt::format("a group's block size must be in [1, {}] (the pool's largest block), got {}",
                                    block_size_, g.block_size));
  if (policy_) policy_->attach(blocks_);
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i].id = BlockId{static_cast<int32_t>(i)};
  blocks_[0].is_null = true;  // block tables point here for skipped (out-of-window) positions
  for (size_t i = 1; i < blocks_.size(); ++i) push_free(blocks_[i]);
  if (enable_caching_) {
    tokens_.resize(blocks_.size() * static_cast<size_t>(block_size_));
    meta_.resize(blocks_.size());
  }
  events_.reserve(1024);
}

void BlockPool::refuse_negative_allocation(int n) {
  throw UsageError(fmt::format("cannot allocate a negative number of blocks ({})", n));
}

void BlockPool::touch(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    KVCacheBlock& b = mut(id);
    if (b.is_null) continue;  // the null block is shared freely and never counted
    if (b.ref_cnt == 0) remove_free(b);
    ++b.ref_cnt;
  }
}

template <typename Ids>
void BlockPool::drop_references(const Ids& ordered) {
  // Drop the references first and undo them if any block was already free, so that a bad call
  // changes nothing. (A block listed twice needs two references: the second drop catches it.)
  for (size_t i = 0; i < ordered.size(); ++i) {
    const BlockId id = ordered[i];
    if (id.value == 0) continue;  // releasing the null block is a no-op (sliding-window tables)
    if (id.value < 0 || id.value >= num_blocks() || blocks_[static_cast<size_t>(id.value)].ref_cnt <= 0) {
      for (size_t j = 0; j < i; ++j)
        if (ordered[j].value != 0) ++blocks_[static_cast<size_t>(ordered[j].value)].ref_cnt;
      if (id.value < 0 || id.value >= num_blocks())
        throw UsageError(fmt::format("free: block id {} out of range [1, {})", id.value, num_blocks()));
      throw UsageError(fmt::format("double free: block {} is already free", id.value));
    }
    --blocks_[static_cast<size_t>(id.value)].ref_cnt;
  }
}

template <typename Ids>
void BlockPool::release(const Ids& ordered) {
  drop_references(ordered);
  // Blocks that reached zero join the free set in the order given.
  for (size_t i = 0; i < ordered.size(); ++i) {
    KVCacheBlock& b = blocks_[static_cast<size_t>(ordered[i].value)];
    if (b.ref_cnt == 0 && !b.in_free_queue && !b.is_null) push_free(b);
  }
}

void BlockPool::free_blocks(std::span<const BlockId> ordered) { release(ordered); }

void BlockPool::free_window_blocks(std::span<const BlockId> ordered) {
  drop_references(ordered);
  for (BlockId id : ordered) {
    KVCacheBlock& b = blocks_[static_cast<size_t>(id.value)];
    if (b.ref_cnt != 0 || b.in_free_queue || b.is_null) continue;
    if (b.has_hash && b.window_checkpoint) {
      ++stats_.window_checkpoints_retained;
      push_free(b);
      continue;
    }
    ++stats_.window_blocks_slid_out;
    if (b.has_hash) uncache(b, RemovalReason::kSlidOut);
    push_free_evict_first(b);
  }
}

namespace {
// A table read back to front (what std::views::reverse gives, without <ranges>: clang 14, which
// builds the fuzz targets, cannot compile libstdc++ 12's reverse_view).
struct TailFirst {
  std::span<const BlockId> table;
  size_t size() const { return table.size(); }
  BlockId operator[](size_t i) const { return table[table.size() - 1 - i]; }
};
}  // namespace

void BlockPool::free_blocks_tail_first(std::span<const BlockId> table) { release(TailFirst{table}); }

void BlockPool::cache_block(BlockId id, const BlockContentKey& key) {
  if (!enable_caching_) return;
  KVCacheBlock& b = mut(id);
  if (b.is_null || b.ref_cnt <= 0)
    throw UsageError(fmt::format("cache_block: block {} is not held by any request", id.value));
  if (b.has_hash) return;  // already registered (e.g. shared after a fork)
  const int group_tokens = group_block_size(key.group);
  if (key.tokens.size() != static_cast<size_t>(group_tokens))
    throw UsageError(
        fmt::format("cache_block: only full blocks are cached ({} tokens given, block size {} in group {})",
                    key.tokens.size(), group_tokens, key.group));
  size_t i = static_cast<size_t>(id.value);
  TokenId* content = tokens_.data() + i * static_cast<size_t>(block_size_);
  if (group_tokens == 16)  // the common block size: a fixed-size copy compiles to a few moves, no libc call
    std::memcpy(content, key.tokens.data(), 16 * sizeof(TokenId));
  else std::memcpy(content, key.tokens.data(), key.tokens.size() * sizeof(TokenId));
  CachedMeta& meta = meta_[i];
  meta.parent = key.parent;
  meta.extra_digest = key.extra_digest;
  const uint64_t parent_id = key.parent_block == kUnknownParent ? kUnknownPrefix : prefix_id_of(key.parent_block);
  meta.parent_prefix_id = parent_id;
  meta.prefix_id = kUnknownPrefix;  // set below: an equal cached copy's id, or a new one
  b.hash = key.hash;
  b.has_hash = true;
  b.window_checkpoint = false;
  b.group = key.group;
  b.num_tokens = group_tokens;
  b.hit_count = 0;
  b.next_same_hash = kNoLink;
  const int32_t head = cache_map_.find_or_insert(map_key(key.hash, key.group), id.value);
  if (head != kNoLink) {  // append: the earliest cached block stays first
    int32_t t = head;
    for (;; t = blocks_[static_cast<size_t>(t)].next_same_hash) {
      const size_t ti = static_cast<size_t>(t);
      if (meta.prefix_id == kUnknownPrefix && parent_id != kUnknownPrefix && meta_[ti].parent_prefix_id == parent_id &&
          matches(blocks_[ti], key))
        meta.prefix_id = meta_[ti].prefix_id;  // the same prefix cached twice: one identity
      if (blocks_[ti].next_same_hash == kNoLink) break;
    }
    blocks_[static_cast<size_t>(t)].next_same_hash = id.value;
  }
  if (meta.prefix_id == kUnknownPrefix) meta.prefix_id = next_prefix_id_++;
  ++num_cached_;
  ++stats_.cached_blocks_stored;
  if (enable_events_) {
    KVEvent e;
    e.kind = KVEventKind::kBlockStored;
    e.hash = key.hash;
    e.parent_hash = key.parent;
    e.has_parent = key.parent_block != kNoLink;  // a request's first block has none (vLLM: None)
    e.token_count = group_tokens;
    e.block = id;
    fill_group(e, key.group);
    events_.push_back(e);
  }
}

void BlockPool::record_hit(BlockId id) {
  KVCacheBlock& b = mut(id);
  ++b.hit_count;
  if (policy_) policy_->on_hit(b);
}

bool BlockPool::uncache(KVCacheBlock& b, RemovalReason reason) {
  if (on_uncache_) on_uncache_(b, reason);
  const bool last_copy = unlink_cached_block(cache_map_, blocks_, map_key(b.hash, b.group), b);
  if (enable_events_) {
    KVEvent e;
    e.kind = KVEventKind::kBlockRemoved;
    e.hash = b.hash;
    e.block = b.id;
    fill_group(e, b.group);
    e.reason = reason;
    events_.push_back(e);
  }
  b.has_hash = false;
  b.window_checkpoint = false;
  b.hash = BlockHash{};
  b.num_tokens = 0;
  b.hit_count = 0;
  --num_cached_;
  return last_copy;
}

void BlockPool::invalidate_cached(BlockId id) {
  KVCacheBlock& b = mut(id);
  if (b.has_hash) uncache(b, RemovalReason::kInvalidated);
}

ResetResult BlockPool::reset_prefix_cache() {
  ResetResult r;
  for (KVCacheBlock& b : blocks_) {
    if (!b.has_hash) continue;
    if (b.ref_cnt > 0) {
      ++r.kept_in_use;
      continue;
    }
    uncache(b, RemovalReason::kReset);
    ++r.removed;
  }
  stats_.reset_removals += static_cast<uint64_t>(r.removed);
  if (enable_events_ && r.complete()) {
    // One "all cleared" replaces the per-block removals for consumers that rebuild indexes.
    std::erase_if(events_, [](const KVEvent& e) {
      return e.kind == KVEventKind::kBlockRemoved && e.reason == RemovalReason::kReset;
    });
    KVEvent e;
    e.kind = KVEventKind::kAllBlocksCleared;
    events_.push_back(e);
  }
  return r;
}

std::span<const TokenId> BlockPool::cached_tokens(BlockId id) const {
  const KVCacheBlock& b = block(id);
  const int n = b.has_hash ? b.num_tokens : block_size_;
  return std::span<const TokenId>(tokens_).subspan(static_cast<size_t>(id.value) * static_cast<size_t>(block_size_),
                                                   static_cast<size_t>(n));
}

std::vector<KVEvent> BlockPool::take_events() {
  std::vector<KVEvent> out;
  out.swap(events_);
  events_.reserve(1024);
  return out;
}

void BlockPool::check_invariants() const {
  auto fail = [](std::string msg) { throw InvariantError("BlockPool: " + msg); };
  const KVCacheBlock& null_block = blocks_[0];
  if (!null_block.is_null || null_block.in_free_queue || null_block.has_hash)
    fail("the null block is free, cached or unmarked");
  // Free set membership: exactly the ref-0 non-null blocks, each once.
  std::vector<uint8_t> seen(blocks_.size(), 0);
  int count = 0;
  auto visit = [&](const KVCacheBlock& b) {
    size_t i = static_cast<size_t>(b.id.value);
    if (seen[i]) fail(fmt::format("block {} appears twice in the free set", i));
    seen[i] = 1;
    ++count;
    if (b.ref_cnt != 0) fail(fmt::format("block {} is in the free set with ref_cnt {}", i, b.ref_cnt));
    if (b.is_null) fail("the null block is in the free set");
    if (!b.in_free_queue) fail(fmt::format("block {} is in the free set but not flagged", i));
  };
  if (policy_) {
    policy_->for_each(visit);
  } else {
    int32_t prev = kNoLink;
    for (int32_t i = free_queue_.front(); i != kNoLink; i = blocks_[static_cast<size_t>(i)].next_free) {
      if (blocks_[static_cast<size_t>(i)].prev_free != prev)
        fail(fmt::format("free queue back-link of block {} is broken", i));
      visit(blocks_[static_cast<size_t>(i)]);
      prev = i;
      if (count > num_blocks()) fail("free queue has a cycle");
    }
    if (prev != free_queue_.back()) fail("free queue tail is wrong");
  }
  if (count != num_free_blocks()) fail(fmt::format("free set size {} but {} blocks linked", num_free_blocks(), count));
  int cached = 0;
  for (const KVCacheBlock& b : blocks_) {
    size_t i = static_cast<size_t>(b.id.value);
    if (b.ref_cnt < 0) fail(fmt::format("block {} has negative ref_cnt {}", i, b.ref_cnt));
    if (!b.is_null && b.ref_cnt == 0 && !seen[i]) fail(fmt::format("block {} has ref_cnt 0 but is not free", i));
    if (b.in_free_queue && !seen[i]) fail(fmt::format("block {} is flagged free but not in the free set", i));
    if (b.window_checkpoint && !b.has_hash)
      fail(fmt::format("block {} is a window checkpoint without cached content", i));
    if (!b.has_hash) continue;
    ++cached;
    if (!enable_caching_) fail(fmt::format("block {} is cached with caching disabled", i));
    // The block must be reachable from its hash's chain.
    bool found = false;
    for (int32_t j = cache_map_.find(map_key(b.hash, b.group)); j != kNoLink;
         j = blocks_[static_cast<size_t>(j)].next_same_hash)
      if (j == b.id.value) {
        found = true;
        break;
      }
    if (!found) fail(fmt::format("cached block {} (hash {}) is not in the cache map", i, b.hash.hex()));
  }
  if (cached != num_cached_) fail(fmt::format("{} blocks carry hashes but the count says {}", cached, num_cached_));
  size_t chain_total = 0;
  cache_map_.for_each([&](const BlockHash& key, int32_t head) {
    for (int32_t j = head; j != kNoLink; j = blocks_[static_cast<size_t>(j)].next_same_hash) {
      const KVCacheBlock& b = blocks_[static_cast<size_t>(j)];
      if (!b.has_hash || map_key(b.hash, b.group) != key)
        fail(fmt::format("cache map entry points at block {} with another hash", j));
      if (++chain_total > blocks_.size()) fail("cache map chains have a cycle");
    }
  });
  if (chain_total != static_cast<size_t>(num_cached_)) fail("cache map chains do not cover exactly the cached blocks");
}

}  // namespace pagedkv
