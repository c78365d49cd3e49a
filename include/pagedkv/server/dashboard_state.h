// The state the dashboard (GET /dashboard) draws, as one JSON snapshot of a running engine:
// every block's state, the LRU order of the cached free blocks, the requests with their blocks,
// the cumulative counters (the page turns them into rates) and the tiers.
//
// Taken on the engine thread between steps (it reads the engine), at most once per refresh
// period whatever the number of viewers (DashboardSnapshots).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <mutex>
#include <string>

#include "pagedkv/engine/llm_engine.h"

namespace pagedkv::server {

class EngineService;

// blocks: one character per block id: 'n' the null block, 'f' free, 'c' cached and free (reusable
// until evicted; lru[] lists them, first evicted first), 'u' held by one request, 's' shared by
// several (refs[] says how many), 'p' a swapped request's block whose KV is still being copied
// back from a tier.
nlohmann::json dashboard_state(const LLMEngine& engine);

// The latest snapshot as JSON text, refreshed through the engine thread when older than the
// refresh period; concurrent viewers share one snapshot.
class DashboardSnapshots {
 public:
  DashboardSnapshots(EngineService& service, std::chrono::milliseconds period) : service_(service), period_(period) {}
  std::string get();
  double last_cost_ms() const;  // engine-thread time of the last snapshot

 private:
  EngineService& service_;
  const std::chrono::milliseconds period_;
  mutable std::mutex mutex_;
  std::string json_;
  std::chrono::steady_clock::time_point taken_{};
  double cost_ms_ = 0;
};

}  // namespace pagedkv::server
