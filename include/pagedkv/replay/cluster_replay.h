// Many instances against one global pool (the Mooncake paper's Fig. 10 question): N serving
// instances, each with its own KV cache of C blocks and a router sending every request to one of
// them, compared with a single cache of N * C blocks that every request can read. Cache-only:
// requests in file order, no compute time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/replay/cache_replay.h"
#include "pagedkv/replay/trace.h"

namespace pagedkv {

enum class RouterKind {
  kRoundRobin,  // request i goes to instance i mod N
  kCacheAware,  // the instance already holding the longest prefix, within a load-balance bound
  // pagedkv router's kv policy (router/routing_policy.h): the lowest
  //   prefill_scale * max(0, prompt blocks - hit blocks) + in-flight blocks,
  // where a request is in flight from its arrival for its measured latency (TraceRequest::
  // latency_ms; unknown: none) and holds cdiv(prompt + output, block size) blocks. Ties go to
  // fewer requests in flight, then to the next instance in rotation, as in the router.
  kKv,
};
std::string_view router_name(RouterKind r);
std::optional<RouterKind> parse_router(std::string_view s);

struct ClusterReplayConfig {
  int block_size = 16;
  int64_t capacity_blocks_per_instance = 0;
  int instances = 10;
  RouterKind router = RouterKind::kRoundRobin;
  std::string policy = "lru";
  // Cache-aware routing only considers instances whose routed prompt tokens do not exceed
  // (1 + balance_slack) times the mean over instances; without a bound every request would
  // follow the shared first block to one instance. The least loaded instance always qualifies.
  double balance_slack = 0.2;
  double prefill_scale = 2.0;  // kKv only: as pagedkv router's default
  bool run_global = true;  // also replay the global pool of instances * capacity blocks
  std::function<void(size_t, size_t)> progress;
};

struct InstanceTotals {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t hit_blocks = 0;
  int64_t evictions = 0;
};

struct ClusterReplayResult {
  ClusterReplayConfig config;  // progress cleared
  CacheReplayResult local;  // all instances together (capacity = instances * per-instance)
  std::optional<CacheReplayResult> global;
  std::vector<InstanceTotals> per_instance;

  // Prompt tokens each request still had to prefill, on average.
  static double prefill_tokens_per_request(const CacheReplayResult& r) {
    return r.requests ? static_cast<double>(r.prompt_tokens - r.hit_tokens()) / static_cast<double>(r.requests) : 0.0;
  }
};

ClusterReplayResult replay_cluster(const Trace& trace, const ClusterReplayConfig& config);

}  // namespace pagedkv
