#include "full_attention_group.h"

#include <algorithm>

#include "pagedkv/core/block_footprint.h"

namespace pagedkv {

int FullAttentionGroup::find_longest_cache_hit(const Request& request, int max_tokens, std::vector<BlockId>& out,
                                               HitSearchStats&) const {
  out.clear();
  const int max_blocks = std::min(max_tokens / spec_.block_size, hashed_blocks(request));
  for (int i = 0; i < max_blocks; ++i) {
    if (i + kLookupPrefetchDistance < max_blocks)
      pool_->prefetch_lookup(block_hash(request, i + kLookupPrefetchDistance), tag());
    auto hit = pool_->find_cached(content_key(request, i, i == 0 ? kNoLink : out.back().value));
    if (!hit) break;
    out.push_back(*hit);
  }
  return static_cast<int>(out.size()) * spec_.block_size;
}

void FullAttentionGroup::cache_full_blocks(const Request& request, std::span<const BlockId> blocks, int& num_cached,
                                           int num_tokens, int) {
  const int num_full = std::min(num_tokens / spec_.block_size, hashed_blocks(request));
  if (num_cached >= num_full) return;
  cache_blocks(request, blocks, num_cached, num_full);
  num_cached = num_full;
}

int FullAttentionGroup::footprint_blocks(const Request& request, int chunk_tokens) const {
  return static_cast<int>(block_footprint(spec_, request.num_tokens(), chunk_tokens));
}

}  // namespace pagedkv
