// A sliding-window group's policy (vLLM's SlidingWindowManager): a token attends to the last
// `sliding_window` tokens, so blocks that fell out of every future window are released, and a
// prefix hit needs only the window before its end cached (earlier positions become the null
// block). Under retention (KVCacheManagerConfig::sliding_window_retention) only blocks a
// lookup can reach are cached: those in the window before a hit point a later request can
// stop at (retention checkpoints).
#pragma once

#include <span>
#include <vector>

#include "kv_cache_group_base.h"
#include "pagedkv/core/ceil_div.h"

namespace pagedkv {

// The manager's retention settings, as a sliding group needs them.
struct SlidingWindowRetention {
  bool enabled = true;
  int checkpoint_interval = 0;  // tokens; 0: no periodic checkpoints
  int hit_alignment = 1;  // prefix hits are multiples of this many tokens
};

class SlidingWindowGroup : public KVCacheGroupBase {
 public:
  SlidingWindowGroup(int index, const KVCacheSpec& spec, const KVCacheGroupPlace& place,
                     const SlidingWindowRetention& retention);

  static constexpr bool kCacheable = true;

  // The longest hit within `max_tokens` tokens whose window is cached, searched right to left
  // (a miss rules out every window that holds it); returns the tokens it covers.
  int find_longest_cache_hit(const Request& request, int max_tokens, std::vector<BlockId>& out,
                             HitSearchStats& stats) const;
  // A shorter hit needs a window ending exactly there: searched again, may confirm less.
  int confirm_hit(const Request& request, int hit_tokens, std::vector<BlockId>& out, HitSearchStats& stats) const {
    return find_longest_cache_hit(request, hit_tokens, out, stats);
  }
  int blocks_needed(const Request&, std::span<const BlockId> held, bool may_share_writable, int num_tokens,
                    std::span<const BlockId> new_computed, int num_computed_tokens) const {
    return blocks_needed_for_tokens(held, may_share_writable, num_tokens, new_computed, num_computed_tokens);
  }
  int blocks_to_add(const Request&, int held, int num_tokens) const {
    return ceil_div(num_tokens, spec_.block_size) - held;
  }
  // Releases the blocks no window after `num_computed_tokens` reaches (nulling their entries;
  // `scratch` is working space). Returns whether the table changed.
  bool remove_skipped_blocks(std::vector<BlockId>& blocks, int num_computed_tokens, std::vector<BlockId>& scratch);
  // Caches full blocks up to `num_tokens` past `num_cached`: every one without retention; with
  // it, checkpoints and the window before the current end only. `divergence_tokens`: where the
  // request's prompt left a prefix the full-attention groups had cached (0: none).
  void cache_full_blocks(const Request& request, std::span<const BlockId> blocks, int& num_cached, int num_tokens,
                         int divergence_tokens);
  // Releases the request's table, tail first; under retention the window before the aligned end
  // of what was cached stays as a checkpoint and every other block is evicted first.
  void free(std::vector<BlockId>& blocks, int num_cached);
  // Blocks held at the largest: the window before a chunk, the chunk and one of misalignment.
  int footprint_blocks(const Request& request, int chunk_tokens) const;
  bool caches_every_full_block() const { return !retention_.enabled; }

 private:
  // Block `i` lies in the window before one of the request's reachable hit points.
  bool is_window_checkpoint(const Request& request, int divergence_tokens, int i) const;
  // Tokens as a hit point in blocks of this group (hit points are multiples of hit_alignment).
  int hit_point(int tokens) const {
    return tokens / retention_.hit_alignment * retention_.hit_alignment / spec_.block_size;
  }

  SlidingWindowRetention retention_;
  int window_blocks_;  // blocks before a hit point its window needs: ceil((window - 1) / block_size)
};

}  // namespace pagedkv
