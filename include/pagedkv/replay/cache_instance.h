// One serving instance's KV cache in the cache-only setting: a real KVCacheManager (and so a
// real BlockPool, hasher and prefix cache) serving requests one at a time with no compute time.
// Serving a request is what vLLM does to admit and finish it:
//   look up its longest cached prefix (at most input-1 tokens: one token is always computed),
//   take those blocks, allocate the rest from the free set (evicting cached blocks handed out),
//   cache every full block, then free all of them tail first.
// With the default LRU this is exactly the "vLLM block-pool semantics" of
// ../shared/traces/README.md.
#pragma once

#include <cstdint>
#include <string>

#include "pagedkv/block/eviction_policies.h"
#include "pagedkv/manager/kv_cache_manager.h"
#include "pagedkv/manager/request.h"
#include "pagedkv/replay/trace.h"

namespace pagedkv {

struct CacheInstanceConfig {
  int block_size = 16;
  int64_t capacity_blocks = 0;  // usable blocks (the pool adds its reserved null block)
  std::string policy = "lru";  // make_eviction_policy name
  int max_prompt_tokens = 0;  // longest prompt to be served (sizes per-request tables)
  HashAlgorithm hash_algorithm = HashAlgorithm::kXxh3_128;
};

// What serving one request did.
struct ServeOutcome {
  int64_t blocks = 0;  // ceil(input / block_size)
  int64_t hit_blocks = 0;  // prefix blocks found cached
  bool served = false;  // false: the prompt needs more blocks than the whole pool
};

// The manager configuration replay uses: one full-attention group of config.block_size, a pool of
// config.capacity_blocks usable blocks (plus the null block), prefix caching on, the named
// eviction policy. `length_aware` (if not null) is pointed at the policy when it is one.
KVCacheManagerConfig replay_manager_config(const CacheInstanceConfig& config,
                                           LengthAwarePolicy** length_aware = nullptr);

// Loads trace request `i` into `out` (reusing its buffers): prompt tokens, no hashes yet.
void load_trace_request(const Trace& trace, size_t i, RequestId id, Request& out);

class CacheInstance {
 public:
  explicit CacheInstance(const CacheInstanceConfig& config);

  // Prefix blocks `request` would hit now (hashes the request if needed; changes no blocks).
  int64_t peek_hit_blocks(Request& request);
  // Serves `request` as described above. `request` must not be held by this instance.
  ServeOutcome serve(Request& request);

  const KVCacheManager& manager() const { return manager_; }
  int block_size() const { return block_size_; }
  int64_t capacity_blocks() const { return capacity_blocks_; }
  uint64_t evictions() const { return manager_.pool().stats().evicted_entries; }

 private:
  int block_size_;
  int64_t capacity_blocks_;
  LengthAwarePolicy* length_aware_ = nullptr;  // owned by the pool; told each block's position
  KVCacheManager manager_;
  ComputedBlocks computed_;
};

}  // namespace pagedkv
