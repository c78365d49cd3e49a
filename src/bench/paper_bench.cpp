#include "pagedkv/bench/paper_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "pagedkv/demo/demo_workload.h"
#include "pagedkv/core/error.h"
#include "pagedkv/loadgen/arrival_process.h"

namespace pagedkv::bench {
namespace {

using demo::DemoRng;

// A log-normal draw with the given mean and log-space sigma (Box-Muller on the portable generator).
double lognormal(DemoRng& rng, double mean, double sigma) {
  const double u1 = std::max(rng.uniform(), 1e-300);
  const double u2 = rng.uniform();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  const double mu = std::log(mean) - sigma * sigma / 2;
  return std::exp(mu + sigma * z);
}

}  // namespace

LengthDistribution sharegpt_like() { return {"sharegpt", 161, 1.0, 338, 0.8, 1024}; }
LengthDistribution alpaca_like() { return {"alpaca", 19, 0.5, 58, 0.7, 1024}; }

LengthDistribution scaled(LengthDistribution d, double factor) {
  d.prompt_mean *= factor;
  d.output_mean *= factor;
  d.max_prompt_tokens = std::max(1, static_cast<int>(d.max_prompt_tokens * factor));
  return d;
}

ModelConfig paper_model_config() {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 176;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.vocab_size = 256;
  c.seq_len = 2048;
  c.shared_classifier = true;
  return c;
}

double MemoryShares::token_state_share_of_used() const {
  const double used = token_states + reserved + internal_fragmentation;
  return used > 0 ? token_states / used : 1.0;
}

std::vector<BenchRequest> make_requests(const LengthDistribution& d, int n, double rate, int max_model_len,
                                        uint64_t seed) {
  if (n < 1) throw ConfigError(fmt::format("a request stream needs at least one request, got {}", n));
  const std::vector<double> arrivals = loadgen::arrival_times(n, rate, 1.0, seed);
  DemoRng rng(seed ^ 0x5eed'1e57'0000'0000ull);
  std::vector<BenchRequest> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    BenchRequest& r = out[i];
    r.arrival_s = arrivals[i];
    const double p = lognormal(rng, d.prompt_mean, d.prompt_sigma);
    const double o = lognormal(rng, d.output_mean, d.output_sigma);
    r.shared_prefix_tokens = std::clamp(d.shared_prefix_tokens, 0, max_model_len / 2);
    r.prompt_tokens =
        r.shared_prefix_tokens + std::clamp(static_cast<int>(std::lround(p)), 1,
                                            std::min(d.max_prompt_tokens, max_model_len - 1 - r.shared_prefix_tokens));
    r.output_tokens = std::clamp(static_cast<int>(std::lround(o)), 1, max_model_len - r.prompt_tokens);
  }
  return out;
}

RunResult run_stream(const Model& model, const PaperSetup& setup, KVReservation policy,
                     const std::vector<BenchRequest>& requests, int n_samples, int beam_width) {
  const auto wall0 = std::chrono::steady_clock::now();
  EngineConfig config;
  config.block_size = setup.block_size;
  config.kv_cache_bytes = setup.kv_cache_bytes;
  config.swap_space_bytes = 0;  // recompute preemption, as vLLM's default for these workloads
  // The baselines share nothing (the paper's Orca); paged runs as pagedkv does.
  config.enable_prefix_caching = policy == KVReservation::kPaged;
  config.scheduler.max_num_seqs = setup.max_num_seqs;
  config.scheduler.max_num_batched_tokens = setup.max_num_batched_tokens;
  config.scheduler.preemption_mode = PreemptionMode::kRecompute;
  config.scheduler.kv_reservation = policy;
  config.scheduler.range_allocation = setup.range_allocation;
  config.check_invariants = setup.check_invariants;
  config.record_block_usage = false;
  config.max_model_len = setup.max_model_len;
  LLMEngine engine(model, config);
  const int max_len = engine.max_model_len();
  const int vocab = model.config().vocab_size;

  struct Live {
    double arrival = 0;
    int output = 0;
  };
  std::unordered_map<uint64_t, Live> live;
  DemoRng rng(0x7a11'ce11ull);
  RunResult res;
  res.rate = requests.size() > 1 ? static_cast<double>(requests.size() - 1) / requests.back().arrival_s : 0;
  const double window_begin = requests[requests.size() / 10].arrival_s;
  double weight = 0, running_weighted = 0, slots_per_running = 0;
  double latency_sum = 0;
  int finished_sequences = 0;
  double now = 0;
  size_t next = 0;
  while (next < requests.size() || engine.has_unfinished()) {
    while (next < requests.size() && requests[next].arrival_s <= now) {
      const BenchRequest& b = requests[next++];
      GenerationRequest g;
      g.prompt.resize(static_cast<size_t>(b.prompt_tokens));
      for (size_t k = 0; k < g.prompt.size(); ++k)
        g.prompt[k] = static_cast<int>(k) < b.shared_prefix_tokens
                          ? static_cast<TokenId>(1 + (37 * k + 11) % (vocab - 1))
                          : rng.uniform_int(1, vocab - 1);
      g.sampling.temperature = 0;
      g.n = n_samples;
      g.beam_width = beam_width;
      g.stop.max_tokens = max_len - b.prompt_tokens;  // the declared maximum: what Orca (Max) reserves
      g.stop.known_output_tokens = b.output_tokens;  // the dataset's length: where the request ends
      const RequestId id = engine.add_request(std::move(g));
      live[id.value] = Live{b.arrival_s, b.output_tokens};
    }
    if (!engine.has_unfinished()) {
      now = requests[next].arrival_s;
      continue;
    }
    const std::vector<RequestOutput> outputs = engine.step();
    const EngineStepWork& w = engine.stats().last_step;
    StepWork work;
    work.prefill_tokens = w.prefill_tokens;
    work.prefill_token_pairs = w.prefill_token_pairs;
    work.decode_seqs = w.decode_seqs;
    work.decode_context_tokens = w.decode_context_tokens;
    work.swapped_blocks = w.copied_blocks;
    const double dt = setup.cost.step_seconds(work);
    if (now >= window_begin && (next < requests.size() || engine.scheduler().num_waiting() > 0)) {
      const KVMemoryBreakdown m = engine.scheduler().memory_breakdown();
      const double total = static_cast<double>(m.total_slots);
      res.memory.token_states += dt * static_cast<double>(m.token_states) / total;
      res.memory.reserved += dt * static_cast<double>(m.reserved) / total;
      res.memory.internal_fragmentation += dt * static_cast<double>(m.internal_fragmentation) / total;
      res.memory.external_fragmentation += dt * static_cast<double>(m.external_fragmentation) / total;
      res.memory.free += dt * static_cast<double>(m.free) / total;
      const int running = engine.scheduler().num_running();
      running_weighted += dt * running;
      if (running > 0) slots_per_running += dt * static_cast<double>(m.used()) / running;
      if (n_samples > 1 || beam_width > 1) {
        double logical = 0;
        for (const SchedulerRequest* r : engine.scheduler().running())
          logical += static_cast<double>(engine.scheduler().block_ids(*r).size());
        res.logical_blocks += dt * logical;
        res.physical_blocks += dt * static_cast<double>(m.used()) / setup.block_size;
      }
      weight += dt;
    }
    now += dt;
    for (const RequestOutput& o : outputs) {
      if (!o.finished) continue;
      const uint64_t root = o.sample_index == 0 ? o.id.value : o.parent.value;
      const auto it = live.find(root);
      if (it == live.end()) throw InvariantError(fmt::format("bench paper: output for unknown request {}", root));
      if (o.finish_reason == FinishReason::kRejected) {
        ++res.rejected;
        continue;
      }
      latency_sum += (now - it->second.arrival) / static_cast<double>(std::max<size_t>(o.output.size(), 1));
      ++finished_sequences;
      if (o.sample_index == 0) ++res.completed;
    }
  }
  res.duration_s = now;
  res.normalized_latency_s = finished_sequences > 0 ? latency_sum / finished_sequences : 0;
  res.throughput_rps = now > 0 ? res.completed / now : 0;
  if (weight > 0) {
    for (double* x : {&res.memory.token_states, &res.memory.reserved, &res.memory.internal_fragmentation,
                      &res.memory.external_fragmentation, &res.memory.free})
      *x /= weight;
    res.mean_running = running_weighted / weight;
    res.mean_slots_per_running = slots_per_running / weight;
    res.logical_blocks /= weight;
    res.physical_blocks /= weight;
  }
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return res;
}

}  // namespace pagedkv::bench
