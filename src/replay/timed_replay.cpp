#include "pagedkv/core/percentile.h"
#include "pagedkv/replay/timed_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "pagedkv/core/cpu_clock.h"
#include "pagedkv/core/error.h"
#include "pagedkv/replay/cache_instance.h"
#include "pagedkv/replay/cache_replay.h"
#include "pagedkv/scheduler/scheduler.h"

namespace pagedkv {
namespace {

// The token every "sampled" output gets. Its value does not matter for caching: output blocks
// are chained after their own request's prompt, so they only match a request with the same
// prompt and outputs, which would share them in a real engine too.
constexpr TokenId kOutputToken = std::numeric_limits<TokenId>::max();

struct RequestTimes {
  double arrival = 0;
  double first_scheduled = -1;
  double first_token = -1;
  double finish = -1;
  int outputs = 0;
};

}  // namespace

LatencySummary summarize_latencies(std::vector<double> values) {
  LatencySummary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = percentile_of_sorted(values, 50);
  s.p90 = percentile_of_sorted(values, 90);
  s.p99 = percentile_of_sorted(values, 99);
  s.max = values.back();
  return s;
}

TimedReplayResult replay_timed(const Trace& trace, const TimedReplayConfig& config) {
  config.cost.validate();
  if (!(config.time_scale > 0))
    throw ConfigError(fmt::format("time scale must be positive, got {}", config.time_scale));
  if (!(config.timeline_interval_s > 0))
    throw ConfigError(fmt::format("timeline interval must be positive, got {}", config.timeline_interval_s));
  const double cpu_start = thread_cpu_seconds();

  CacheInstanceConfig ic;
  ic.block_size = config.block_size;
  ic.capacity_blocks = config.capacity_blocks;
  ic.policy = config.policy;
  for (const TraceRequest& r : trace.requests)
    ic.max_prompt_tokens = std::max<int>(ic.max_prompt_tokens, r.input_tokens + std::max(1, r.output_tokens));
  KVCacheManager manager(replay_manager_config(ic));
  Scheduler scheduler(config.scheduler, manager, config.swap_blocks);

  TimedReplayResult res;
  res.trace = trace.name;
  res.cost_model = config.cost.name;
  res.requests = static_cast<int64_t>(trace.size());
  std::vector<RequestTimes> times(trace.size());
  // Requests are added in arrival order; a trace out of order is replayed sorted.
  std::vector<size_t> order(trace.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return trace.requests[a].arrival_ms < trace.requests[b].arrival_ms; });
  for (size_t i = 0; i < trace.size(); ++i)
    times[i].arrival = trace.requests[i].arrival_ms / 1000.0 * config.time_scale;

  double now = order.empty() ? 0.0 : times[order.front()].arrival;
  const double start = now;
  double next_sample = now;
  size_t next = 0;
  int64_t finished = 0;
  const size_t report_every = std::max<size_t>(1, trace.size() / 200);
  std::vector<SampledTokens> sampled;
  int idle_steps = 0;

  // Each timeline point averages its interval, weighting every state by how long it lasted
  // (a step's state is what it leaves behind; idle gaps count as empty).
  struct Accumulated {
    double time = 0, usage = 0, running = 0, waiting = 0, swapped = 0;
  } acc;
  auto accumulate = [&](double dt) {
    acc.time += dt;
    acc.usage += dt * manager.usage();
    acc.running += dt * scheduler.num_running();
    acc.waiting += dt * scheduler.num_waiting();
    acc.swapped += dt * scheduler.num_swapped();
  };
  auto emit_points = [&] {
    while (next_sample + config.timeline_interval_s <= now) {
      const double w = acc.time > 0 ? 1.0 / acc.time : 0.0;
      TimelinePoint p;
      p.time_s = next_sample + config.timeline_interval_s - start;
      p.pool_usage = acc.usage * w;
      p.running = static_cast<int>(std::lround(acc.running * w));
      p.waiting = static_cast<int>(std::lround(acc.waiting * w));
      p.swapped = static_cast<int>(std::lround(acc.swapped * w));
      p.finished = finished;
      p.hit_rate = res.hit_rate();
      res.timeline.push_back(p);
      acc = Accumulated{};
      next_sample += config.timeline_interval_s;
    }
  };

  while (next < order.size() || scheduler.has_unfinished()) {
    if (!scheduler.has_unfinished() && times[order[next]].arrival > now) {  // idle until it arrives
      acc.time += times[order[next]].arrival - now;
      now = times[order[next]].arrival;
      emit_points();
    }
    while (next < order.size() && times[order[next]].arrival <= now) {
      const size_t i = order[next++];
      auto r = std::make_unique<SchedulerRequest>();
      load_trace_request(trace, i, RequestId{i}, r->kv);
      r->stop.max_tokens = std::max(1, trace.requests[i].output_tokens);
      r->stop.ignore_eos = true;
      scheduler.add_request(std::move(r));
    }
    SchedulerOutput out = scheduler.schedule();
    if (out.chunks.empty()) {
      // Nothing could run (admission paused, or every waiting prompt too large to fit now).
      if (next < order.size()) {
        if (times[order[next]].arrival > now) {
          accumulate(times[order[next]].arrival - now);
          now = times[order[next]].arrival;
          emit_points();
        }
        continue;
      }
      if (++idle_steps > 2)
        throw InvariantError(fmt::format("timed replay: {} requests wait but none can be scheduled at t = {:.3f} s",
                                         scheduler.num_waiting() + scheduler.num_swapped(), now - start));
    } else {
      idle_steps = 0;
    }
    StepWork work;
    work.swapped_blocks = static_cast<int64_t>(out.swap_in.size() + out.swap_out.size());
    for (const ScheduledChunk& c : out.chunks) {
      const Request& kv = c.request->kv;
      const size_t i = static_cast<size_t>(kv.id.value);
      if (times[i].first_scheduled < 0) {
        times[i].first_scheduled = now;
        res.prompt_tokens += kv.num_prompt_tokens;
        res.hit_tokens += std::max(0, c.request->prefix_hit_tokens);
      }
      const bool decode = c.num_new_tokens == 1 && c.first_position >= kv.num_prompt_tokens;
      if (decode) {
        ++work.decode_seqs;
        work.decode_context_tokens += c.first_position + 1;
      } else {
        work.prefill_tokens += c.num_new_tokens;
        work.prefill_token_pairs += static_cast<double>(c.num_new_tokens) * (c.first_position + 0.5 * c.num_new_tokens);
      }
    }
    res.prefill_tokens += work.prefill_tokens;
    const double step = config.cost.step_seconds(work);
    now += step;
    ++res.steps;

    sampled.assign(out.chunks.size(), SampledTokens{});
    for (size_t k = 0; k < out.chunks.size(); ++k) {
      if (!out.chunks[k].samples) continue;
      sampled[k].token = kOutputToken;
      RequestTimes& t = times[static_cast<size_t>(out.chunks[k].request->kv.id.value)];
      if (t.first_token < 0) t.first_token = now;
      ++t.outputs;
    }
    const std::vector<SchedulerRequest*> done = scheduler.update(out, sampled);
    for (SchedulerRequest* r : done) {
      const size_t i = static_cast<size_t>(r->kv.id.value);
      if (r->finish_reason == FinishReason::kRejected) {
        ++res.rejected;
      } else {
        times[i].finish = now;
        res.output_tokens += r->num_output_tokens();
      }
      ++finished;
      scheduler.release_finished(r->kv.id);
      if (config.progress && finished % static_cast<int64_t>(report_every) == 0)
        config.progress(static_cast<size_t>(finished), trace.size());
    }
    res.max_pool_usage = std::max(res.max_pool_usage, manager.usage());
    accumulate(step);
    emit_points();
  }
  if (acc.time > 0) {  // the last, partial interval
    next_sample = now - config.timeline_interval_s;
    emit_points();
  }
  res.finished = finished - res.rejected;
  res.duration_s = now - start;
  res.preemptions_recompute = scheduler.stats().preemptions_recompute;
  res.preemptions_swap = scheduler.stats().preemptions_swap;

  std::vector<double> ttft, tpot, queueing, e2e;
  for (const RequestTimes& t : times) {
    if (t.finish < 0) continue;  // rejected
    ttft.push_back(t.first_token - t.arrival);
    queueing.push_back(t.first_scheduled - t.arrival);
    e2e.push_back(t.finish - t.arrival);
    if (t.outputs >= 2) tpot.push_back((t.finish - t.first_token) / (t.outputs - 1));
  }
  res.ttft = summarize_latencies(std::move(ttft));
  res.tpot = summarize_latencies(std::move(tpot));
  res.queueing = summarize_latencies(std::move(queueing));
  res.e2e = summarize_latencies(std::move(e2e));
  if (config.progress) config.progress(trace.size(), trace.size());
  res.cpu_seconds = thread_cpu_seconds() - cpu_start;
  return res;
}

}  // namespace pagedkv
