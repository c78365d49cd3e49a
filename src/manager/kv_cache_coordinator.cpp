#include "kv_cache_coordinator.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace pagedkv {

KVCacheCoordinator::KVCacheCoordinator(const KVCacheConfig& cache, const KVCacheGroupPlace& place,
                                       const SlidingWindowRetention& retention)
    : hit_alignment_(hit_alignment(cache)) {
  groups_.reserve(cache.groups.size());
  for (size_t g = 0; g < cache.groups.size(); ++g)
    groups_.emplace_back(static_cast<int>(g), cache.groups[g].spec, place, retention);
}

int KVCacheCoordinator::hit_alignment(const KVCacheConfig& cache) {
  // Every block size is a multiple of the smallest, so this is at most their product over it.
  int l = 1;
  for (const auto& g : cache.groups)
    if (KVCacheGroup::cacheable(g.spec.kind)) l = std::lcm(l, g.spec.block_size);
  return l;
}

int KVCacheCoordinator::find_common_hit(const Request& request, int max_tokens, ComputedBlocks& out,
                                        HitSearchStats& stats) const {
  const auto align = [&](int tokens) { return tokens / hit_alignment_ * hit_alignment_; };
  // First every group on its own (what it would confirm alone: group_hit_tokens).
  std::array<int, kMaxKVCacheGroups> confirmed{};
  int hit = -1, most = 0;
  for (int g = 0; g < num_groups(); ++g) {
    const KVCacheGroup& group = groups_[static_cast<size_t>(g)];
    if (!group.cacheable()) continue;
    const auto gi = static_cast<size_t>(g);
    confirmed[gi] = group.find_longest_cache_hit(request, max_tokens, out.blocks[gi], stats);
    out.group_hit_tokens[gi] = confirmed[gi];
    if (hit < 0 || confirmed[gi] < hit) {
      hit = confirmed[gi];
      out.limiting_group = g;
    }
    most = std::max(most, confirmed[gi]);
  }
  if (hit < 0) return 0;  // no cacheable group
  if (most == hit) out.limiting_group = -1;  // the groups agree: none cut the others short
  hit = align(hit);
  // Then the fixed point: every group confirms the shorter hit (a full group by truncation, a
  // sliding group by a window ending exactly there, which may confirm less).
  for (bool reduced = true; reduced;) {
    reduced = false;
    for (int g = 0; g < num_groups(); ++g) {
      const KVCacheGroup& group = groups_[static_cast<size_t>(g)];
      const auto gi = static_cast<size_t>(g);
      if (!group.cacheable() || confirmed[gi] == hit) continue;
      confirmed[gi] = group.confirm_hit(request, hit, out.blocks[gi], stats);
      if (confirmed[gi] < hit) {
        hit = align(confirmed[gi]);
        out.limiting_group = g;
        reduced = true;
      }
    }
  }
  return hit;
}

}  // namespace pagedkv
