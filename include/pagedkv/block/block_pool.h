// BlockPool: the fixed set of physical blocks, who holds them, which are free, and which hold
// cached prefix content (vLLM's BlockPool). Everything is sized at construction; allocate,
// free and touch never allocate memory.
//
// Lifecycle of a block: free (in the free set, ref 0, maybe still cached) -> allocated or
// touched (ref >= 1, out of the free set) -> cached once full (hash set, still in use) ->
// freed (ref 0, back of the free set, content kept) -> evicted when handed out again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "pagedkv/block/cached_block_map.h"
#include "pagedkv/block/eviction_policy.h"
#include "pagedkv/block/free_block_queue.h"
#include "pagedkv/block/kv_cache_block.h"
#include "pagedkv/block/kv_events.h"
#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

// BlockContentKey::parent_block when no previous block can be named (see there).
inline constexpr int32_t kUnknownParent = -2;

// What a request claims a full block holds. A cached block matches only if all of it agrees,
// so a hash collision can never hand one request another request's KV.
struct BlockContentKey {
  BlockHash hash;
  BlockHash parent;  // hash of the previous block (the root hash for block 0)
  std::span<const TokenId> tokens;
  uint64_t extra_digest = 0;  // digest of the block's extra keys (LoRA, multimodal, salt)
  uint16_t group = 0;
  // The block that holds the previous block of this sequence (the previous hit of a lookup, the
  // request's own previous table entry when caching); kNoLink for block 0. With it, a match also
  // confirms the prefix structurally: colliding parent hashes cannot splice a block cached
  // after one prefix onto another. kUnknownParent: no block to name (a sliding-window lookup, a
  // caller that does not track tables); the parent is then confirmed by its hash alone.
  int32_t parent_block = kUnknownParent;
};

struct BlockPoolOptions {
  int num_blocks = 0;  // including the reserved null block 0
  int block_size = 16;  // tokens of the largest block (the stride of cached content)
  bool enable_caching = true;
  bool enable_events = false;
  // Null: LRU through the built-in free queue (vLLM's order).
  std::unique_ptr<EvictionPolicy> policy;
  // Per KV-cache group: its attention kind and window, copied into the events, and its block
  // size (tokens a cached block of that group holds; at most block_size). Empty: every group is
  // full attention with block_size tokens a block.
  std::vector<KVCacheSpec> group_specs;
};

struct BlockPoolStats {
  uint64_t allocated_blocks = 0;  // blocks handed out by allocate()
  uint64_t evictions = 0;  // cached blocks whose content was dropped to reuse them
  // Evictions that dropped the last cached copy of a content, i.e. prefix-cache entries lost
  // (equal content cached twice is one entry; evicting one copy of two loses nothing).
  uint64_t evicted_entries = 0;
  uint64_t cached_blocks_stored = 0;
  uint64_t reset_removals = 0;
  // Sliding-window blocks released by free_window_blocks: kept cached at the back of the free
  // set as retention checkpoints, or dropped to its front (slid out); and checkpoints whose
  // content was later evicted to reuse the block.
  uint64_t window_checkpoints_retained = 0;
  uint64_t window_blocks_slid_out = 0;
  uint64_t window_checkpoints_evicted = 0;
};

struct ResetResult {
  int removed = 0;  // cached entries dropped
  int kept_in_use = 0;  // cached blocks kept because requests still hold them
  bool complete() const { return kept_in_use == 0; }
};

class BlockPool {
 public:
  explicit BlockPool(BlockPoolOptions options);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_usable_blocks() const { return num_blocks() - 1; }
  int block_size() const { return block_size_; }
  // Tokens a block of `group` holds (groups of a hybrid pool may differ; see BlockPoolOptions).
  int group_block_size(uint16_t group) const {
    return group < group_specs_.size() ? group_specs_[group].block_size : block_size_;
  }
  bool caching_enabled() const { return enable_caching_; }
  int num_free_blocks() const { return policy_ ? policy_->size() : free_queue_.size(); }
  // Fraction of usable blocks not free (vLLM's usage).
  double usage() const { return 1.0 - static_cast<double>(num_free_blocks()) / num_usable_blocks(); }
  int num_cached_blocks() const { return num_cached_; }
  BlockId null_block() const { return BlockId{0}; }
  const KVCacheBlock& block(BlockId id) const { return blocks_[static_cast<size_t>(id.value)]; }
  std::span<const KVCacheBlock> blocks() const { return blocks_; }
  std::string_view policy_name() const { return policy_ ? policy_->name() : "lru"; }

  // Hands out `n` free blocks (ref 1 each), appending their ids to `out`. All or nothing:
  // returns false and changes nothing when fewer than `n` are free. A handed-out block that
  // still holds cached content is evicted from the cache first (one eviction each).
  bool allocate(int n, std::vector<BlockId>& out);

  // Adds one reference to each block (a prefix hit or a fork). A block that was free leaves
  // the free set.
  void touch(std::span<const BlockId> ids);

  // Drops one reference from each block, in the given order; blocks reaching 0 join the back of
  // the free set in that order (callers pass a request's blocks tail first). Throws UsageError
  // and changes nothing if any block is already free or is the null block ("double free").
  void free_blocks(std::span<const BlockId> ordered);
  // free_blocks over `table` last entry first (a request's whole table: its private tail joins
  // the free set, and is evicted, before its shared head), without copying it reversed.
  void free_blocks_tail_first(std::span<const BlockId> table);
  // free_blocks for sliding-window blocks that left a request's window: a block reaching 0 that
  // is a retention checkpoint (mark_window_checkpoint) joins the back, cached, like any freed
  // block; any other loses its cache entry (RemovalReason::kSlidOut) and joins the front, to be
  // handed out before every block whose content a lookup could still use.
  void free_window_blocks(std::span<const BlockId> ordered);
  // Marks cached block `id` as a retention checkpoint of a sliding-window group (until it
  // loses its cache entry). No-op when the block is not cached.
  void mark_window_checkpoint(BlockId id) {
    KVCacheBlock& b = mut(id);
    if (b.has_hash) b.window_checkpoint = true;
  }

  // Prefix cache. The first cached block that matches `key` exactly, or nullopt.
  std::optional<BlockId> find_cached(const BlockContentKey& key) const;
  // Registers full block `id` (in use) as holding `key`'s content.
  void cache_block(BlockId id, const BlockContentKey& key);
  // Hints for callers walking a request's blocks: start loading what find_cached(hash, group)
  // or cache_block(id, ...) will touch, one block ahead (the walks are cache-miss bound).
  void prefetch_lookup(const BlockHash& hash, uint16_t group) const {
    if (enable_caching_) cache_map_.prefetch(map_key(hash, group));
  }
  void prefetch_caching(BlockId id, const BlockHash& hash, uint16_t group) const {
    if (!enable_caching_) return;
    const size_t i = static_cast<size_t>(id.value);
    cache_map_.prefetch(map_key(hash, group));
    __builtin_prefetch(&blocks_[i]);
    __builtin_prefetch(&meta_[i]);
    __builtin_prefetch(&tokens_[i * static_cast<size_t>(block_size_)]);
  }
  // Called on a hit that the caller is about to take (hit statistics, LFU-style policies).
  void record_hit(BlockId id);
  // Drops every cached entry not in use. Blocks in use keep theirs; the result says how many.
  ResetResult reset_prefix_cache();
  // Drops block `id`'s cache entry (its content will not be computed after all). No-op when
  // the block is not cached.
  void invalidate_cached(BlockId id);

  // Cached content of a block (valid while block(id).has_hash).
  std::span<const TokenId> cached_tokens(BlockId id) const;
  const BlockHash& cached_parent(BlockId id) const { return meta_[static_cast<size_t>(id.value)].parent; }
  uint64_t cached_extra_digest(BlockId id) const { return meta_[static_cast<size_t>(id.value)].extra_digest; }
  // The key block `id` is cached under, as a lookup would present it (valid while
  // block(id).has_hash): for a lower tier that stores the block's content. It names no parent
  // block (kUnknownParent): the parent is confirmed by its hash.
  BlockContentKey cached_key(BlockId id) const {
    const KVCacheBlock& b = block(id);
    return BlockContentKey{.hash = b.hash,
                           .parent = cached_parent(id),
                           .tokens = cached_tokens(id),
                           .extra_digest = cached_extra_digest(id),
                           .group = b.group,
                           .parent_block = kUnknownParent};
  }

  // Called just before a cached block loses its content key: evicted to reuse the block
  // (RemovalReason::kEvicted), invalidated, or dropped by a prefix-cache reset. Its bytes stay
  // intact until the block is next allocated, so a lower tier can copy them out now (offload of
  // evicted prefixes, deferred swap copies). One listener at a time.
  void set_uncache_listener(std::function<void(const KVCacheBlock&, RemovalReason)> f) { on_uncache_ = std::move(f); }

  const BlockPoolStats& stats() const { return stats_; }
  // Events since the last call (empty unless enabled).
  std::vector<KVEvent> take_events();
  bool events_enabled() const { return enable_events_; }

  // Validates the pool: the free set holds exactly the ref-0 non-null blocks, links are
  // consistent, the map and the blocks' hashes agree, the null block is never free.
  // Throws InvariantError describing the first violation.
  void check_invariants() const;

 private:
  KVCacheBlock& mut(BlockId id) { return blocks_[static_cast<size_t>(id.value)]; }
  template <typename Ids>
  void release(const Ids& ordered);
  void push_free(KVCacheBlock& b) {
    if (policy_) policy_->push(b);
    else free_queue_.push_back(b);
  }
  void push_free_evict_first(KVCacheBlock& b) {
    if (policy_) policy_->push_evict_first(b);
    else free_queue_.push_front(b);
  }
  // Drops one reference from each block (all or nothing: UsageError on a double free).
  template <typename Ids>
  void drop_references(const Ids& ordered);
  void fill_group(KVEvent& e, uint16_t group) const {
    e.group = group;
    if (group < group_specs_.size()) {
      e.attention_kind = group_specs_[group].kind;
      e.sliding_window =
          group_specs_[group].kind == AttentionKind::kSlidingWindow ? group_specs_[group].sliding_window : 0;
    }
  }
  void remove_free(KVCacheBlock& b) {
    if (policy_) policy_->remove(b);
    else free_queue_.remove(b);
  }
  KVCacheBlock& pop_free() { return policy_ ? policy_->pop() : free_queue_.pop_front(); }
  BlockHash map_key(const BlockHash& h, uint16_t group) const {
    return BlockHash{h.lo ^ (static_cast<uint64_t>(group) * 0x9E3779B97F4A7C15ull), h.hi};
  }
  bool matches(const KVCacheBlock& b, const BlockContentKey& key) const;
  // Prefix identity of the sequence ending in `parent_block` (see prefix_id_): kRootPrefix for
  // kNoLink, kUnknownPrefix when that block holds no cached content.
  uint64_t prefix_id_of(int32_t parent_block) const;
  static constexpr uint64_t kRootPrefix = 0;
  static constexpr uint64_t kUnknownPrefix = ~uint64_t{0};
  // Returns true if `b` was the last cached copy of its content.
  bool uncache(KVCacheBlock& b, RemovalReason reason);
  [[noreturn, gnu::cold]] static void refuse_negative_allocation(int n);

  int block_size_;
  bool enable_caching_;
  bool enable_events_;
  std::vector<KVCacheBlock> blocks_;
  FreeBlockQueue free_queue_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<KVCacheSpec> group_specs_;
  CachedBlockMap cache_map_;
  std::vector<TokenId> tokens_;  // [num_blocks][block_size] content of cached blocks
  // What confirms a cached block besides its tokens, together so that a lookup or a caching
  // touches one record per block instead of four arrays.
  struct CachedMeta {
    BlockHash parent;  // parent hash
    uint64_t extra_digest = 0;
    // Structural chain confirmation. Every cached block gets the id of its whole prefix (its own
    // content after its parent's prefix); equal content after an equal prefix shares the id, so
    // duplicates stay interchangeable, as with honest hashes. parent_prefix_id is the parent's
    // id at caching time (kUnknownPrefix: cached without a known parent, confirmed by hash only).
    uint64_t prefix_id = 0;
    uint64_t parent_prefix_id = 0;
  };
  std::vector<CachedMeta> meta_;  // per block, valid while it is cached
  uint64_t next_prefix_id_ = kRootPrefix + 1;
  int num_cached_ = 0;
  BlockPoolStats stats_;
  std::vector<KVEvent> events_;
  std::function<void(const KVCacheBlock&, RemovalReason)> on_uncache_;
};

// The lookup is on every admission's path (once per prompt block): inline, with the match
// tests cheapest first.
inline uint64_t BlockPool::prefix_id_of(int32_t parent_block) const {
  if (parent_block == kNoLink) return kRootPrefix;
  if (parent_block < 0 || parent_block >= num_blocks()) return kUnknownPrefix;
  return blocks_[static_cast<size_t>(parent_block)].has_hash ? meta_[static_cast<size_t>(parent_block)].prefix_id
                                                             : kUnknownPrefix;
}

// Inline: every allocate_slots that opens a block comes here.
inline bool BlockPool::allocate(int n, std::vector<BlockId>& out) {
  if (n < 0) refuse_negative_allocation(n);
  if (n > num_free_blocks()) return false;
  for (int i = 0; i < n; ++i) {
    KVCacheBlock& b = pop_free();
    if (!policy_ && i + 1 < n) {
      // The free queue is a linked list: load the next block and the map slot of its hash while
      // this one is evicted, instead of one cache miss after another.
      const KVCacheBlock& next = blocks_[static_cast<size_t>(free_queue_.front())];
      if (next.next_free != kNoLink) __builtin_prefetch(&blocks_[static_cast<size_t>(next.next_free)]);
      if (next.has_hash) cache_map_.prefetch(map_key(next.hash, next.group));
    }
    if (b.has_hash) {
      if (b.window_checkpoint) ++stats_.window_checkpoints_evicted;
      if (uncache(b, RemovalReason::kEvicted)) ++stats_.evicted_entries;
      ++stats_.evictions;
    }
    b.ref_cnt = 1;
    out.push_back(b.id);
  }
  stats_.allocated_blocks += static_cast<uint64_t>(n);
  return true;
}

inline bool BlockPool::matches(const KVCacheBlock& b, const BlockContentKey& key) const {
  if (b.group != key.group || b.hash != key.hash) return false;
  const size_t i = static_cast<size_t>(b.id.value);
  const CachedMeta& meta = meta_[i];
  if (meta.parent != key.parent || meta.extra_digest != key.extra_digest) return false;
  if (key.tokens.size() != static_cast<size_t>(b.num_tokens)) return false;
  // Compared without a libc call (a block is a few dozen bytes): the loop vectorizes.
  const TokenId* cached = tokens_.data() + i * static_cast<size_t>(block_size_);
  uint32_t diff = 0;
  for (size_t k = 0; k < key.tokens.size(); ++k) diff |= static_cast<uint32_t>(key.tokens[k] ^ cached[k]);
  if (diff != 0) return false;
  // The same content, and cached after the same prefix as the caller's previous block.
  return key.parent_block == kUnknownParent || meta.parent_prefix_id == kUnknownPrefix ||
         meta.parent_prefix_id == prefix_id_of(key.parent_block);
}

inline std::optional<BlockId> BlockPool::find_cached(const BlockContentKey& key) const {
  if (!enable_caching_) return std::nullopt;
  for (int32_t i = cache_map_.find(map_key(key.hash, key.group)); i != kNoLink;
       i = blocks_[static_cast<size_t>(i)].next_same_hash) {
    if (matches(blocks_[static_cast<size_t>(i)], key)) return BlockId{i};
  }
  return std::nullopt;
}

}  // namespace pagedkv
