// The experiments of `pagedkv bench paper` (docs/paper.md): the PagedAttention paper's headline
// figures reproduced on pagedkv's own engine, with its Orca baselines as KV reservation policies
// of the same scheduler (scheduler/kv_reservation.h).
//
// The engine runs for real (scheduler, block pool or contiguous allocator, arena, kernels, a
// random-weight model, sampling) on a modelled clock: each step advances time by what a step
// cost model (replay/step_cost_model.h, default the paper's OPT-13B on an A100) says that step's
// work takes. On two CPU cores the model's own compute grows linearly with the batch, so batching
// more requests, which is what KV memory buys, would not show; on the paper's GPU a decode step
// costs about the same for 10 or 40 sequences. Everything is a pure function of the seeds: the
// figures do not depend on the machine or its load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/model.h"
#include "pagedkv/replay/step_cost_model.h"

namespace pagedkv::bench {

// Prompt and output lengths drawn from log-normal distributions with the given means and log-space
// standard deviations, rounded, at least 1 token, the prompt at most max_prompt_tokens and
// prompt + output at most max_model_len (so the sample means come out a little lower).
struct LengthDistribution {
  std::string name;
  double prompt_mean = 0;
  double prompt_sigma = 0;
  double output_mean = 0;
  double output_sigma = 0;
  int max_prompt_tokens = 1024;
  // Every prompt starts with the same this many tokens (a one-shot or few-shot example, the
  // paper's Fig. 16), before its drawn part.
  int shared_prefix_tokens = 0;
};
LengthDistribution sharegpt_like();  // means 161 / 338 (the paper's ShareGPT), sigmas 1.0 / 0.8
LengthDistribution alpaca_like();  // means 19 / 58 (the paper's Alpaca), sigmas 0.5 / 0.7
// The same shape with means and the prompt cap multiplied by `factor` (--quick runs a shorter model).
LengthDistribution scaled(LengthDistribution d, double factor);

struct BenchRequest {
  double arrival_s = 0;
  int prompt_tokens = 0;  // the shared prefix included
  int output_tokens = 0;
  int shared_prefix_tokens = 0;
};
// `n` requests with Poisson arrivals at `rate` per second; the same seed gives the same lengths
// at every rate (only the gaps scale).
std::vector<BenchRequest> make_requests(const LengthDistribution& d, int n, double rate, int max_model_len,
                                        uint64_t seed);

struct PaperSetup {
  ModelConfig model;
  size_t kv_cache_bytes = 16u << 20;
  int block_size = 16;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;  // 0: the model's seq_len
  StepCostModel cost;
  RangeAllocation range_allocation = RangeAllocation::kBuddy;  // the baselines' (the paper assumes buddy)
  bool check_invariants = false;  // the engine's checkers after every step (tests)
};
// dim 64, hidden 176, 2 layers, 4 query and 4 KV heads of 16, vocab 256, seq_len 2048:
// 1 KiB of f32 KV per token, so 16 MiB hold 16,384 tokens (the paper's OPT-13B on an A100-40GB
// has room for about 15,700 at 800 KiB each). Small, so that a run's real compute stays seconds.
ModelConfig paper_model_config();

// KVMemoryBreakdown's categories as time-weighted shares of the pool (they sum to 1).
struct MemoryShares {
  double token_states = 0;
  double reserved = 0;
  double internal_fragmentation = 0;
  double external_fragmentation = 0;
  double free = 0;
  // Token states over the used part of the pool (token states + reserved + internal).
  double token_state_share_of_used() const;
};

// One run of a request stream through the engine.
struct RunResult {
  double rate = 0;
  int completed = 0;
  int rejected = 0;
  double normalized_latency_s = 0;  // mean over requests of end-to-end latency / output tokens
  double throughput_rps = 0;  // completed requests / time of the last finish
  double mean_running = 0;  // sequences in the batch, time-weighted
  double duration_s = 0;  // modelled time
  double wall_s = 0;  // real time the run took here
  // Time-weighted shares of the pool while the stream is loading the engine: from the arrival of
  // the first tenth of the requests until the last one arrived and none is left waiting.
  MemoryShares memory;
  double mean_slots_per_running = 0;  // allocated (used) slots per running sequence, time-weighted
  // Parallel sampling and beam search: time-weighted blocks the sequences' tables name (what
  // they would hold without sharing) and the blocks actually in use.
  double logical_blocks = 0;
  double physical_blocks = 0;
};

// `n_samples` parallel samples, or beam search of `beam_width` (paged only; one of them is 1).
RunResult run_stream(const Model& model, const PaperSetup& setup, KVReservation policy,
                     const std::vector<BenchRequest>& requests, int n_samples = 1, int beam_width = 1);

}  // namespace pagedkv::bench
