#include "sliding_window_group.h"

#include <algorithm>

#include "pagedkv/core/block_footprint.h"
#include "pagedkv/core/ceil_div.h"

namespace pagedkv {

SlidingWindowGroup::SlidingWindowGroup(int index, const KVCacheSpec& spec, const KVCacheGroupPlace& place,
                                       const SlidingWindowRetention& retention)
    : KVCacheGroupBase(index, spec, place),
      retention_(retention),
      window_blocks_(ceil_div(spec.sliding_window - 1, spec.block_size)) {}

int SlidingWindowGroup::find_longest_cache_hit(const Request& request, int max_tokens, std::vector<BlockId>& out,
                                               HitSearchStats& stats) const {
  // A hit of `end` blocks needs only the window before it cached: blocks [end - needed, end)
  // (clamped at 0); earlier positions become the null block. Candidates are tried right to left,
  // each window's leftmost block first: a miss there rules out every window ending after it, so
  // the search skips a whole window per miss.
  const int max_blocks = std::min(max_tokens / spec_.block_size, hashed_blocks(request));
  const int needed = window_blocks_;
  const BlockId null = pool_->null_block();
  out.assign(static_cast<size_t>(max_blocks), null);
  if (needed == 0) return max_blocks * spec_.block_size;  // a window of one token needs no earlier block
  int end = max_blocks;
  while (end > 0) {
    const int first = std::max(0, end - needed);
    int miss = -1;
    for (int k = 0; k < end - first && miss < 0; ++k) {
      const int i = k == 0 ? first : end - k;  // leftmost, then right to left
      if (out[static_cast<size_t>(i)] != null) continue;  // known from a wider candidate
      ++stats.window_probes;
      // Scanning right to left, the previous block is not known yet: confirmed by hash only.
      auto hit = pool_->find_cached(content_key(request, i, kUnknownParent));
      if (hit) out[static_cast<size_t>(i)] = *hit;
      else miss = i;
    }
    if (miss < 0) {
      out.resize(static_cast<size_t>(end));
      return end * spec_.block_size;
    }
    end = miss;  // every window that holds the missing block is out
  }
  out.clear();
  return 0;
}

bool SlidingWindowGroup::remove_skipped_blocks(std::vector<BlockId>& blocks, int num_computed_tokens,
                                               std::vector<BlockId>& scratch) {
  // Tokens before (num_computed - window + 1) are never attended to again.
  const int last_useful_token = num_computed_tokens - spec_.sliding_window + 1;
  const int last_useful_block = last_useful_token / spec_.block_size;
  scratch.clear();
  for (int i = std::min(last_useful_block, static_cast<int>(blocks.size())) - 1; i >= 0; --i) {
    BlockId& b = blocks[static_cast<size_t>(i)];
    if (b == pool_->null_block()) break;
    scratch.push_back(b);
    b = pool_->null_block();
  }
  if (scratch.empty()) return false;
  // Retention: checkpoints stay cached at the back, the rest go to the front (evicted first).
  if (retention_.enabled) pool_->free_window_blocks(scratch);
  else pool_->free_blocks(scratch);
  return true;
}

bool SlidingWindowGroup::is_window_checkpoint(const Request& request, int divergence_tokens, int i) const {
  // Block i is in the window before hit point P (in blocks) when i + 1 <= P <= i + needed.
  const int needed = window_blocks_;
  if (needed == 0) return false;
  const auto before = [&](int point) { return i + 1 <= point && point <= i + needed; };
  // The prompt's aligned end, and the start of its last block: where a request repeating the
  // prompt (lookups stop one token short) or editing its last block hits.
  if (before(hit_point(request.num_prompt_tokens))) return true;
  if (before(hit_point(std::max(0, request.num_prompt_tokens - 1)))) return true;
  const int divergence = hit_point(divergence_tokens);
  if (divergence > 0 && before(divergence)) return true;
  const int interval = retention_.checkpoint_interval / spec_.block_size;
  return interval > 0 && (i + needed) / interval >= ceil_div(i + 1, interval);
}

void SlidingWindowGroup::cache_full_blocks(const Request& request, std::span<const BlockId> blocks, int& num_cached,
                                           int num_tokens, int divergence_tokens) {
  const int num_full = std::min(num_tokens / spec_.block_size, hashed_blocks(request));
  if (num_cached >= num_full) return;
  if (!retention_.enabled) {
    cache_blocks(request, blocks, num_cached, num_full);
    num_cached = num_full;
    return;
  }
  // Only blocks a lookup can reach: checkpoints, and the window before the current end (the
  // sequence's last checkpoint if it ends here; dropped when it slides out otherwise), that end
  // taken at a hit point.
  const int end_window = std::min(num_full, hit_point(num_tokens)) - window_blocks_;
  for (int i = num_cached; i < num_full; ++i) {
    const BlockId b = blocks[static_cast<size_t>(i)];
    if (b == pool_->null_block()) continue;
    const bool checkpoint = is_window_checkpoint(request, divergence_tokens, i);
    if (!checkpoint && i < end_window) continue;
    pool_->cache_block(b, content_key(request, i, i == 0 ? kNoLink : blocks[static_cast<size_t>(i) - 1].value));
    if (checkpoint) pool_->mark_window_checkpoint(b);
  }
  num_cached = num_full;
}

void SlidingWindowGroup::free(std::vector<BlockId>& blocks, int num_cached) {
  if (!retention_.enabled) {
    pool_->free_blocks_tail_first(blocks);
    return;
  }
  // The window before the aligned end of what was cached (a hit point) is the sequence's last
  // reachable hit point (the next turn of a conversation extends it): a checkpoint. Everything
  // else the table still holds (partial or uncomputed blocks) is worthless to a lookup.
  const int end = hit_point(num_cached * spec_.block_size);
  for (int i = std::max(0, end - window_blocks_); i < end; ++i)
    pool_->mark_window_checkpoint(blocks[static_cast<size_t>(i)]);
  std::reverse(blocks.begin(), blocks.end());  // tail first; the caller releases the table
  pool_->free_window_blocks(blocks);
}

int SlidingWindowGroup::footprint_blocks(const Request& request, int chunk_tokens) const {
  return static_cast<int>(block_footprint(spec_, request.num_tokens(), chunk_tokens));
}

}  // namespace pagedkv
