// What a KV-cache group's policy knows whatever its attention kind: its index and spec, the
// block pool, and how a request's blocks of this group are named in the prefix cache. The
// policies (full_attention_group.h, sliding_window_group.h, cross_attention_group.h) derive
// from it; kv_cache_group.h dispatches to them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/manager/request.h"

namespace pagedkv {

// Walks over a request's blocks (lookup, caching) prefetch the pool records of the block this
// many positions ahead, so that its cache misses overlap this block's work (a distance of 2
// measured no better than 1).
inline constexpr int kLookupPrefetchDistance = 1;
// Caching a prefill chunk's blocks does less work per block than a lookup: 4 ahead measured
// 2-3 % faster on the whole peer replay than 1.
inline constexpr int kCachingPrefetchDistance = 4;

// What a prefix lookup counts besides its hit (the manager's PrefixCacheStats).
struct HitSearchStats {
  uint64_t window_probes = 0;  // cache probes of sliding-window searches
};

// Where a group sits in the cache: shared by every group of one manager.
struct KVCacheGroupPlace {
  BlockPool* pool = nullptr;
  int hash_block_size = 0;  // the request's prefix hashes cover blocks of this many tokens
  BlockHash root;  // the hash chain's root: what block 0 follows
};

class KVCacheGroupBase {
 public:
  KVCacheGroupBase(int index, const KVCacheSpec& spec, const KVCacheGroupPlace& place)
      : pool_(place.pool),
        spec_(spec),
        index_(index),
        hash_ratio_(spec.block_size / place.hash_block_size),
        root_(place.root) {}

  int index() const { return index_; }
  const KVCacheSpec& spec() const { return spec_; }
  int block_size() const { return spec_.block_size; }
  // What block i of the request holds. parent_block: see BlockContentKey (the previous hit or
  // table entry; kNoLink for block 0).
  BlockContentKey content_key(const Request& request, int i, int32_t parent_block) const;

 protected:
  uint16_t tag() const { return static_cast<uint16_t>(index_); }  // the group as the pool names it
  // Block i spans hash blocks [i * r, (i + 1) * r), r this group's block size over the hash
  // block size; the chained hash of the last one names the whole prefix up to the block's end.
  const BlockHash& block_hash(const Request& request, int i) const {
    return request.block_hashes[static_cast<size_t>((i + 1) * hash_ratio_ - 1)];
  }
  // Full blocks of this group the request's hashes cover.
  int hashed_blocks(const Request& request) const {
    return static_cast<int>(request.block_hashes.size()) / hash_ratio_;
  }
  // Blocks to take from the free set so that `held` plus `new_computed` cover `num_tokens`
  // tokens: new ones, free cached hits (touching one takes it out of the free set) and, for a
  // request that may share writable blocks, private copies of shared blocks past
  // `num_computed_tokens` (copy-on-write).
  int blocks_needed_for_tokens(std::span<const BlockId> held, bool may_share_writable, int num_tokens,
                               std::span<const BlockId> new_computed, int num_computed_tokens) const;
  // Registers the table's blocks [from, to) in the prefix cache (null entries skipped).
  void cache_blocks(const Request& request, std::span<const BlockId> blocks, int from, int to);

  BlockPool* pool_;
  KVCacheSpec spec_;
  int index_;
  int hash_ratio_;
  BlockHash root_;
};

// Inline: built once per block of every lookup and every caching.
inline BlockContentKey KVCacheGroupBase::content_key(const Request& request, int i, int32_t parent_block) const {
  // Block i is hash blocks [i * r, (i + 1) * r): named by the last one's chained hash, its
  // parent the hash before the first (r = 1 with one block size).
  const int r = hash_ratio_;
  const size_t last = static_cast<size_t>((i + 1) * r - 1);
  const size_t bs = static_cast<size_t>(spec_.block_size);
  BlockContentKey key;
  key.hash = request.block_hashes[last];
  key.parent = i == 0 ? root_ : request.block_hashes[static_cast<size_t>(i * r - 1)];
  key.tokens = std::span<const TokenId>(request.tokens).subspan(static_cast<size_t>(i) * bs, bs);
  key.extra_digest = request.block_extra_digest(last);
  for (int k = 1; k < r; ++k)  // every hash block's extra keys, not only the last one's
    key.extra_digest =
        key.extra_digest * 0x9E3779B97F4A7C15ull ^ request.block_extra_digest(last - static_cast<size_t>(k));
  key.group = tag();
  key.parent_block = parent_block;
  return key;
}

}  // namespace pagedkv
