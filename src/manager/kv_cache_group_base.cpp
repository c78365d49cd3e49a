#include "kv_cache_group_base.h"

#include <algorithm>

#include "pagedkv/core/ceil_div.h"

namespace pagedkv {

int KVCacheGroupBase::blocks_needed_for_tokens(std::span<const BlockId> held, bool may_share_writable, int num_tokens,
                                               std::span<const BlockId> new_computed, int num_computed_tokens) const {
  const int num_held = static_cast<int>(held.size());
  int n = std::max(0, ceil_div(num_tokens, spec_.block_size) - static_cast<int>(new_computed.size()) - num_held);
  for (BlockId b : new_computed) {
    const KVCacheBlock& blk = pool_->block(b);
    if (!blk.is_null && blk.ref_cnt == 0) ++n;  // touching it takes it out of the free set
  }
  if (may_share_writable) {  // a shared block to be written needs a private copy
    for (int i = num_computed_tokens / spec_.block_size; i < num_held; ++i) {
      const KVCacheBlock& blk = pool_->block(held[static_cast<size_t>(i)]);
      if (!blk.is_null && blk.ref_cnt > 1) ++n;
    }
  }
  return n;
}

void KVCacheGroupBase::cache_blocks(const Request& request, std::span<const BlockId> blocks, int from, int to) {
  for (int i = from; i < to; ++i) {
    const BlockId b = blocks[static_cast<size_t>(i)];
    if (i + kCachingPrefetchDistance < to)
      pool_->prefetch_caching(blocks[static_cast<size_t>(i + kCachingPrefetchDistance)],
                              block_hash(request, i + kCachingPrefetchDistance), tag());
    if (b == pool_->null_block()) continue;
    pool_->cache_block(b, content_key(request, i, i == 0 ? kNoLink : blocks[static_cast<size_t>(i) - 1].value));
  }
}

}  // namespace pagedkv
