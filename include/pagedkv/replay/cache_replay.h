// Cache-only replay (the Mooncake paper's Fig. 9 setting): the trace's requests in file order
// through one CacheInstance, no compute time. Reports how much of the prompts the prefix cache
// of a given size and policy would have saved.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "pagedkv/replay/cache_instance.h"
#include "pagedkv/replay/trace.h"

namespace pagedkv {

// A capacity large enough that nothing is ever evicted (the trace's "infinite cache").
inline constexpr int64_t kInfiniteCapacity = std::numeric_limits<int64_t>::max();

struct CacheReplayConfig {
  int block_size = 16;
  int64_t capacity_blocks = 0;  // usable blocks, or kInfiniteCapacity
  std::string policy = "lru";
  HashAlgorithm hash_algorithm = HashAlgorithm::kXxh3_128;
  // Called now and then with (requests done, total); may be empty.
  std::function<void(size_t, size_t)> progress;
};

struct CacheReplayResult {
  std::string trace;
  std::string policy;
  int block_size = 0;
  int64_t capacity_blocks = 0;  // as asked (kInfiniteCapacity: unbounded)
  int64_t pool_blocks = 0;  // instantiated (see replay_cache)
  int64_t requests = 0;
  int64_t unserved_requests = 0;  // prompts larger than the whole pool: counted as all-miss
  int64_t requests_with_hit = 0;  // requests with at least one hit block
  double sum_request_hit_fraction = 0;  // Σ over requests of hit tokens / prompt tokens
  int64_t prompt_tokens = 0;
  int64_t prompt_blocks = 0;  // Σ ceil(input / block_size)
  int64_t hit_blocks = 0;
  // Prefix-cache entries lost to eviction: a cached content whose last copy was reused. This is
  // the traces README's "evictions". Equal content can be cached twice (a request recomputes a
  // block after an earlier miss), so evicted_blocks, which counts every copy, is a bit larger.
  int64_t evictions = 0;
  int64_t evicted_blocks = 0;
  int64_t allocated_blocks = 0;
  int64_t cached_blocks = 0;  // blocks registered in the prefix cache
  int64_t hashed_tokens = 0;  // tokens in full blocks, each hashed once
  int64_t block_ops = 0;  // lookups + allocations + cache insertions + frees
  double seconds = 0;  // wall time of the replay (the trace is already loaded)
  double cpu_seconds = 0;  // CPU time of the replaying thread (robust on a busy machine)

  bool infinite() const { return capacity_blocks == kInfiniteCapacity; }
  int64_t hit_tokens() const { return hit_blocks * block_size; }
  double block_hit_rate() const {
    return prompt_blocks ? static_cast<double>(hit_blocks) / static_cast<double>(prompt_blocks) : 0.0;
  }
  double token_hit_rate() const {
    return prompt_tokens ? static_cast<double>(hit_tokens()) / static_cast<double>(prompt_tokens) : 0.0;
  }
  double request_hit_rate() const {
    return requests ? static_cast<double>(requests_with_hit) / static_cast<double>(requests) : 0.0;
  }
  // Mean over requests of each one's own token hit fraction: short prompts weigh as much as
  // long ones (one of the definitions the Mooncake paper's cache ratios may use).
  double mean_request_hit_fraction() const {
    return requests ? sum_request_hit_fraction / static_cast<double>(requests) : 0.0;
  }
};

// Replays `trace`. A pool larger than the trace's total block count behaves exactly like one of
// that size (the free set hands out never-used blocks first, so no more than that many are ever
// touched), so the pool is capped there: results are identical, memory is not wasted.
CacheReplayResult replay_cache(const Trace& trace, const CacheReplayConfig& config);

// Largest prompt of the trace, in tokens.
int max_prompt_tokens(const Trace& trace);

}  // namespace pagedkv
