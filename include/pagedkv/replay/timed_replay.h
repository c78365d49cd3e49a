// Timed replay: requests arrive at the trace's timestamps and are served by the engine's real
// Scheduler (continuous batching, token budget, chunked prefill, preemption) over a real
// KVCacheManager; a StepCostModel says how long each forward pass takes, and a simulated clock
// advances by it. No model runs: each step "samples" a placeholder token for every sequence
// that reaches its end, until the trace's output length is produced.
//
// Reports what a capacity planner asks: time to first token, time per output token, queueing
// delay (arrival to first scheduled), prefix-cache hits at admission, preemptions, and a time
// series of pool usage and queue lengths.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pagedkv/replay/step_cost_model.h"
#include "pagedkv/replay/trace.h"
#include "pagedkv/scheduler/scheduler_config.h"

namespace pagedkv {

struct TimedReplayConfig {
  int block_size = 16;
  int64_t capacity_blocks = 0;  // usable device blocks
  std::string policy = "lru";
  SchedulerConfig scheduler;
  int swap_blocks = 0;  // host swap space for swap preemption (0: recompute only)
  StepCostModel cost;
  double time_scale = 1.0;  // arrival times are multiplied by this (2: half the rate)
  double timeline_interval_s = 1.0;  // one timeline point (interval means) per this much simulated time
  std::function<void(size_t, size_t)> progress;  // (requests finished, total)
};

// Percentiles of one latency (core/percentile.h), in seconds.
struct LatencySummary {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// Time-weighted means over the interval ending at time_s.
struct TimelinePoint {
  double time_s = 0;
  double pool_usage = 0;  // fraction of usable blocks held by requests
  int running = 0;  // rounded means
  int waiting = 0;
  int swapped = 0;
  int64_t finished = 0;  // requests finished so far
  double hit_rate = 0;  // prefix hit tokens / prompt tokens admitted so far
};

struct TimedReplayResult {
  std::string trace;
  std::string cost_model;
  int64_t requests = 0;
  int64_t finished = 0;
  int64_t rejected = 0;  // prompts larger than the whole cache
  double duration_s = 0;  // simulated: first arrival to last finish
  int64_t steps = 0;
  int64_t prompt_tokens = 0;  // of admitted requests
  int64_t hit_tokens = 0;  // prefix-cache hits at first admission
  int64_t prefill_tokens = 0;  // computed, including recomputation after preemption
  int64_t output_tokens = 0;
  uint64_t preemptions_recompute = 0;
  uint64_t preemptions_swap = 0;
  double max_pool_usage = 0;
  LatencySummary ttft;  // arrival -> first output token
  LatencySummary tpot;  // (finish - first token) / (outputs - 1), requests with >= 2 outputs
  LatencySummary queueing;  // arrival -> first scheduled
  LatencySummary e2e;  // arrival -> finish
  std::vector<TimelinePoint> timeline;
  double cpu_seconds = 0;  // of the simulation itself

  double hit_rate() const {
    return prompt_tokens ? static_cast<double>(hit_tokens) / static_cast<double>(prompt_tokens) : 0.0;
  }
};

TimedReplayResult replay_timed(const Trace& trace, const TimedReplayConfig& config);

LatencySummary summarize_latencies(std::vector<double> values);

}  // namespace pagedkv
