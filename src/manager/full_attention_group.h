// A full-attention group's policy (vLLM's FullAttentionManager): every token attends to all
// earlier ones, so the group keeps every block of a request and caches every full one; a prefix
// hit is the longest run of cached blocks from the start.
#pragma once

#include <span>
#include <vector>

#include "kv_cache_group_base.h"
#include "pagedkv/core/ceil_div.h"

namespace pagedkv {

class FullAttentionGroup : public KVCacheGroupBase {
 public:
  using KVCacheGroupBase::KVCacheGroupBase;

  static constexpr bool kCacheable = true;

  // The longest run of cached blocks from block 0 within `max_tokens` tokens, in `out`; returns
  // the tokens it covers.
  int find_longest_cache_hit(const Request& request, int max_tokens, std::vector<BlockId>& out,
                             HitSearchStats& stats) const;
  // Shortens a hit to `hit_tokens` (a multiple of the block size): any prefix of a hit is one.
  int confirm_hit(const Request&, int hit_tokens, std::vector<BlockId>& out, HitSearchStats&) const {
    out.resize(static_cast<size_t>(hit_tokens / spec_.block_size));
    return hit_tokens;
  }
  int blocks_needed(const Request&, std::span<const BlockId> held, bool may_share_writable, int num_tokens,
                    std::span<const BlockId> new_computed, int num_computed_tokens) const {
    return blocks_needed_for_tokens(held, may_share_writable, num_tokens, new_computed, num_computed_tokens);
  }
  // New blocks a table of `held` blocks takes to hold `num_tokens` slots (negative: none).
  int blocks_to_add(const Request&, int held, int num_tokens) const {
    return ceil_div(num_tokens, spec_.block_size) - held;
  }
  // Every block stays attended to: none is released early.
  bool remove_skipped_blocks(std::vector<BlockId>&, int, std::vector<BlockId>&) { return false; }
  // Caches the full blocks among the first `num_tokens` tokens past the `num_cached` already
  // cached, and advances `num_cached`.
  void cache_full_blocks(const Request& request, std::span<const BlockId> blocks, int& num_cached, int num_tokens,
                         int divergence_tokens);
  // Releases the request's table, tail first (its private tail is evicted before its shared head).
  void free(std::vector<BlockId>& blocks, int) { pool_->free_blocks_tail_first(blocks); }
  // Blocks held at the largest: all of them (chunks accumulate).
  int footprint_blocks(const Request& request, int chunk_tokens) const;
  bool caches_every_full_block() const { return true; }
};

}  // namespace pagedkv
