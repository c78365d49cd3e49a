#include "pagedkv/replay/cluster_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <queue>

#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/cpu_clock.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

std::string_view router_name(RouterKind r) {
  switch (r) {
    case RouterKind::kRoundRobin:
      return "round-robin";
    case RouterKind::kCacheAware:
      return "cache-aware";
    case RouterKind::kKv:
      return "kv";
  }
  return "?";
}

std::optional<RouterKind> parse_router(std::string_view s) {
  if (s == "round-robin" || s == "rr") return RouterKind::kRoundRobin;
  if (s == "cache-aware" || s == "prefix") return RouterKind::kCacheAware;
  if (s == "kv") return RouterKind::kKv;
  return std::nullopt;
}

namespace {

// Picks the instance for one request (see ClusterReplayConfig).
class Router {
 public:
  Router(const ClusterReplayConfig& config)
      : kind_(config.router),
        slack_(config.balance_slack),
        prefill_scale_(config.prefill_scale),
        block_size_(config.block_size),
        routed_tokens_(static_cast<size_t>(config.instances), 0),
        in_flight_(static_cast<size_t>(config.instances)),
        load_blocks_(static_cast<size_t>(config.instances), 0) {}

  size_t route(size_t request_index, const TraceRequest& record, Request& request,
               std::vector<std::unique_ptr<CacheInstance>>& instances) {
    size_t pick = 0;
    if (kind_ == RouterKind::kRoundRobin) {
      pick = request_index % instances.size();
    } else if (kind_ == RouterKind::kKv) {
      pick = route_kv(record, request, instances);
    } else {
      int64_t total = 0;
      for (int64_t t : routed_tokens_) total += t;
      const double bound = (1.0 + slack_) * static_cast<double>(total) / static_cast<double>(instances.size());
      int64_t best_hit = -1;
      for (size_t k = 0; k < instances.size(); ++k) {
        if (static_cast<double>(routed_tokens_[k]) > bound) continue;
        const int64_t hit = instances[k]->peek_hit_blocks(request);
        if (hit > best_hit || (hit == best_hit && routed_tokens_[k] < routed_tokens_[pick])) {
          best_hit = hit;
          pick = k;
        }
      }
    }
    routed_tokens_[pick] += request.num_tokens();
    return pick;
  }

 private:
  struct InFlight {
    double end_ms;
    int64_t blocks;
    bool operator>(const InFlight& o) const { return end_ms > o.end_ms; }
  };
  using InFlightQueue = std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>>;

  size_t route_kv(const TraceRequest& record, Request& request,
                  std::vector<std::unique_ptr<CacheInstance>>& instances) {
    const double now = record.arrival_ms;
    for (size_t k = 0; k < instances.size(); ++k)
      while (!in_flight_[k].empty() && in_flight_[k].top().end_ms <= now) {
        load_blocks_[k] -= in_flight_[k].top().blocks;
        in_flight_[k].pop();
      }
    const int64_t prompt_blocks = ceil_div<int64_t>(request.num_tokens(), block_size_);
    const size_t n = instances.size();
    const size_t start = static_cast<size_t>(turn_++ % n);
    size_t pick = start;
    double best = 0;
    for (size_t j = 0; j < n; ++j) {
      const size_t k = (start + j) % n;
      const double to_prefill =
          std::max<double>(0, static_cast<double>(prompt_blocks - instances[k]->peek_hit_blocks(request)));
      const double cost = prefill_scale_ * to_prefill + static_cast<double>(load_blocks_[k]);
      if (j == 0 || cost < best || (cost == best && in_flight_[k].size() < in_flight_[pick].size())) {
        best = cost;
        pick = k;
      }
    }
    if (record.latency_ms > 0) {
      const int64_t blocks =
          ceil_div<int64_t>(static_cast<int64_t>(record.input_tokens) + record.output_tokens, block_size_);
      in_flight_[pick].push({now + record.latency_ms, blocks});
      load_blocks_[pick] += blocks;
    }
    return pick;
  }

  RouterKind kind_;
  double slack_;
  double prefill_scale_;
  int block_size_;
  std::vector<int64_t> routed_tokens_;
  std::vector<InFlightQueue> in_flight_;
  std::vector<int64_t> load_blocks_;
  uint64_t turn_ = 0;
};

}  // namespace

ClusterReplayResult replay_cluster(const Trace& trace, const ClusterReplayConfig& config) {
  if (config.instances < 1) throw ConfigError(fmt::format("instances must be >= 1, got {}", config.instances));
  if (!(config.balance_slack >= 0))
    throw ConfigError(fmt::format("balance slack must be >= 0, got {}", config.balance_slack));
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  ClusterReplayResult out;
  out.config = config;
  out.config.progress = nullptr;
  out.per_instance.resize(static_cast<size_t>(config.instances));

  CacheInstanceConfig ic;
  ic.block_size = config.block_size;
  ic.capacity_blocks = config.capacity_blocks_per_instance;
  ic.policy = config.policy;
  ic.max_prompt_tokens = max_prompt_tokens(trace);
  std::vector<std::unique_ptr<CacheInstance>> instances;
  for (int k = 0; k < config.instances; ++k) instances.push_back(std::make_unique<CacheInstance>(ic));
  Router router(config);

  CacheReplayResult& local = out.local;
  local.trace = trace.name;
  local.policy = config.policy;
  local.block_size = config.block_size;
  local.capacity_blocks = config.capacity_blocks_per_instance * config.instances;
  local.pool_blocks = local.capacity_blocks;
  Request request;
  request.tokens.reserve(static_cast<size_t>(ic.max_prompt_tokens));
  const size_t total = trace.size();
  const size_t report_every = std::max<size_t>(1, total / 200);
  // The global replay reports progress for the second half.
  auto progress = [&](size_t done) {
    if (config.progress) config.progress(config.run_global ? done / 2 : done, total);
  };
  for (size_t i = 0; i < total; ++i) {
    load_trace_request(trace, i, RequestId{i}, request);
    const size_t k = router.route(i, trace.requests[i], request, instances);
    const ServeOutcome o = instances[k]->serve(request);
    InstanceTotals& t = out.per_instance[k];
    ++t.requests;
    t.prompt_tokens += request.num_tokens();
    local.prompt_tokens += request.num_tokens();
    local.prompt_blocks += o.blocks;
    if (!o.served) {
      ++local.unserved_requests;
      continue;
    }
    t.hit_blocks += o.hit_blocks;
    local.hit_blocks += o.hit_blocks;
    local.requests_with_hit += o.hit_blocks > 0;
    local.sum_request_hit_fraction += static_cast<double>(o.hit_blocks * config.block_size) / request.num_tokens();
    local.hashed_tokens += static_cast<int64_t>(request.block_hashes.size()) * config.block_size;
    if ((i + 1) % report_every == 0) progress(i + 1);
  }
  local.requests = static_cast<int64_t>(total);
  for (size_t k = 0; k < instances.size(); ++k) {
    const BlockPoolStats& s = instances[k]->manager().pool().stats();
    out.per_instance[k].evictions = static_cast<int64_t>(s.evicted_entries);
    local.evictions += static_cast<int64_t>(s.evicted_entries);
    local.evicted_blocks += static_cast<int64_t>(s.evictions);
    local.allocated_blocks += static_cast<int64_t>(s.allocated_blocks);
    local.cached_blocks += static_cast<int64_t>(s.cached_blocks_stored);
  }
  local.block_ops =
      local.hit_blocks + local.allocated_blocks + local.cached_blocks + (local.hit_blocks + local.allocated_blocks);
  local.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  local.cpu_seconds = thread_cpu_seconds() - cpu_start;
  instances.clear();  // free the instances' pools before the global one is built

  if (config.run_global) {
    CacheReplayConfig g;
    g.block_size = config.block_size;
    g.capacity_blocks = local.capacity_blocks;
    g.policy = config.policy;
    if (config.progress) g.progress = [&](size_t done, size_t n) { config.progress(n / 2 + done / 2, n); };
    out.global = replay_cache(trace, g);
  }
  if (config.progress) config.progress(total, total);
  return out;
}

}  // namespace pagedkv
