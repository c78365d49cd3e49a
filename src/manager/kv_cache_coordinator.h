// The KV-cache groups of one manager and what spans them (vLLM's KVCacheCoordinator): the
// prefix hit every cacheable group confirms.
#pragma once

#include <vector>

#include "kv_cache_group.h"
#include "pagedkv/manager/kv_cache_manager.h"

namespace pagedkv {

class KVCacheCoordinator {
 public:
  KVCacheCoordinator(const KVCacheConfig& cache, const KVCacheGroupPlace& place,
                     const SlidingWindowRetention& retention);

  // Prefix hits are multiples of this many tokens: the least common multiple of the cacheable
  // groups' block sizes (every group's table must end on a block boundary there).
  static int hit_alignment(const KVCacheConfig& cache);

  int num_groups() const { return static_cast<int>(groups_.size()); }
  KVCacheGroup& group(int g) { return groups_[static_cast<size_t>(g)]; }
  const KVCacheGroup& group(int g) const { return groups_[static_cast<size_t>(g)]; }

  // The longest prefix every cacheable group confirms, at most `max_tokens` tokens and a
  // multiple of hit_alignment(): each group's blocks in `out`, with what each group confirmed
  // on its own and which one cut the hit short. A fixed point: a group that confirms less
  // shortens the hit, and every other group must then confirm the shorter one.
  int find_common_hit(const Request& request, int max_tokens, ComputedBlocks& out, HitSearchStats& stats) const;

 private:
  std::vector<KVCacheGroup> groups_;
  int hit_alignment_;
};

}  // namespace pagedkv
