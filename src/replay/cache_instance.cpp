#include "pagedkv/replay/cache_instance.h"

#include <fmt/format.h>

#include <limits>

#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

void load_trace_request(const Trace& trace, size_t i, RequestId id, Request& out) {
  out.id = id;
  out.tokens.clear();
  trace.append_prompt(i, out.tokens);
  out.num_prompt_tokens = static_cast<int>(out.tokens.size());
  out.num_computed_tokens = 0;
  out.block_hashes.clear();
  out.block_extra_digests.clear();
}

KVCacheManagerConfig replay_manager_config(const CacheInstanceConfig& c, LengthAwarePolicy** length_aware) {
  if (c.block_size <= 0) throw ConfigError(fmt::format("block size must be positive, got {}", c.block_size));
  if (c.capacity_blocks < 1 || c.capacity_blocks >= std::numeric_limits<int>::max())
    throw ConfigError(fmt::format("capacity must be between 1 and {} blocks, got {}",
                                  std::numeric_limits<int>::max() - 1, c.capacity_blocks));
  KVCacheManagerConfig m;
  m.cache.num_blocks = static_cast<int>(c.capacity_blocks) + 1;  // + the reserved null block
  KVCacheGroupSpec group;
  group.spec.kind = AttentionKind::kFull;
  group.spec.block_size = c.block_size;
  m.cache.groups.push_back(group);
  // Bounds each request's block table; left at 0 the manager would size tables for the pool.
  const int64_t pool_tokens = c.capacity_blocks * c.block_size;
  m.max_model_len = static_cast<int>(std::min<int64_t>(
      std::max(c.max_prompt_tokens, 1), std::min<int64_t>(pool_tokens, std::numeric_limits<int>::max())));
  m.enable_caching = true;
  m.hash_algorithm = c.hash_algorithm;
  m.watermark = 0.0;
  m.eviction_policy = make_eviction_policy(c.policy);
  if (length_aware) *length_aware = dynamic_cast<LengthAwarePolicy*>(m.eviction_policy.get());
  return m;
}

CacheInstance::CacheInstance(const CacheInstanceConfig& config)
    : block_size_(config.block_size),
      capacity_blocks_(config.capacity_blocks),
      manager_(replay_manager_config(config, &length_aware_)) {}

int64_t CacheInstance::peek_hit_blocks(Request& request) {
  manager_.get_computed_blocks(request, computed_);
  return computed_.num_computed_tokens / block_size_;
}

ServeOutcome CacheInstance::serve(Request& request) {
  ServeOutcome out;
  const int n = request.num_tokens();
  out.blocks = ceil_div(n, block_size_);
  if (out.blocks > capacity_blocks_ || n > manager_.max_model_len()) return out;  // can never fit
  manager_.get_computed_blocks(request, computed_);
  const int hit_tokens = computed_.num_computed_tokens;
  if (!manager_.allocate_slots(request, n - hit_tokens, hit_tokens, &computed_))
    throw InvariantError(fmt::format("replay: request {} ({} blocks) did not fit an idle pool of {} blocks",
                                     request.id.value, out.blocks, capacity_blocks_));
  if (length_aware_) {
    const auto blocks = manager_.get_block_ids(request);
    for (size_t i = computed_.blocks[0].size(); i < blocks.size(); ++i)
      length_aware_->set_position(blocks[i], static_cast<int>(i));
  }
  manager_.free(request);
  out.hit_blocks = hit_tokens / block_size_;
  out.served = true;
  return out;
}

}  // namespace pagedkv
