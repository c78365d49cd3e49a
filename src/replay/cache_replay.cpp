#include "pagedkv/replay/cache_replay.h"

#include <algorithm>
#include <chrono>

#include "pagedkv/core/cpu_clock.h"

namespace pagedkv {

int max_prompt_tokens(const Trace& trace) {
  int m = 1;
  for (const TraceRequest& r : trace.requests) m = std::max(m, r.input_tokens);
  return m;
}

CacheReplayResult replay_cache(const Trace& trace, const CacheReplayConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  CacheReplayResult res;
  res.trace = trace.name;
  res.policy = config.policy;
  res.block_size = config.block_size;
  res.capacity_blocks = config.capacity_blocks;
  res.pool_blocks =
      std::min(config.capacity_blocks, std::max<int64_t>(1, trace.total_prompt_blocks(config.block_size)));

  CacheInstanceConfig ic;
  ic.block_size = config.block_size;
  ic.capacity_blocks = res.pool_blocks;
  ic.policy = config.policy;
  ic.max_prompt_tokens = max_prompt_tokens(trace);
  ic.hash_algorithm = config.hash_algorithm;
  CacheInstance instance(ic);

  Request request;
  request.tokens.reserve(static_cast<size_t>(ic.max_prompt_tokens));
  const size_t total = trace.size();
  const size_t report_every = std::max<size_t>(1, total / 200);
  for (size_t i = 0; i < total; ++i) {
    load_trace_request(trace, i, RequestId{i}, request);
    const ServeOutcome o = instance.serve(request);
    res.prompt_tokens += request.num_tokens();
    res.prompt_blocks += o.blocks;
    if (!o.served) {
      ++res.unserved_requests;
    } else {
      res.hit_blocks += o.hit_blocks;
      res.requests_with_hit += o.hit_blocks > 0;
      res.sum_request_hit_fraction += static_cast<double>(o.hit_blocks * config.block_size) / request.num_tokens();
      res.hashed_tokens += static_cast<int64_t>(request.block_hashes.size()) * config.block_size;
    }
    if (config.progress && (i + 1) % report_every == 0) config.progress(i + 1, total);
  }
  res.requests = static_cast<int64_t>(total);
  const BlockPoolStats& stats = instance.manager().pool().stats();
  res.evictions = static_cast<int64_t>(stats.evicted_entries);
  res.evicted_blocks = static_cast<int64_t>(stats.evictions);
  res.allocated_blocks = static_cast<int64_t>(stats.allocated_blocks);
  res.cached_blocks = static_cast<int64_t>(stats.cached_blocks_stored);
  // Each hit block is looked up and touched, each other block allocated, every full block
  // cached, and every block freed.
  res.block_ops = res.hit_blocks + res.allocated_blocks + res.cached_blocks + (res.hit_blocks + res.allocated_blocks);
  if (config.progress) config.progress(total, total);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.cpu_seconds = thread_cpu_seconds() - cpu_start;
  return res;
}

}  // namespace pagedkv
