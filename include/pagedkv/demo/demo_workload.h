// The serving workload `pagedkv demo` replays: many requests of mixed lengths, most of them behind
// one of a few shared system prompts, some asking for several parallel samples, some cancelled
// mid-flight, arriving over time. Everything is a pure function of the seed, and arrivals and
// cancellations are counted in engine steps, not wall-clock time, so a run schedules the same way
// on every machine (only the timings differ).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedkv/engine/llm_engine.h"

namespace pagedkv {
class Tokenizer;
}

namespace pagedkv::demo {

struct DemoWorkloadConfig {
  int num_requests = 64;
  int num_system_prompts = 3;
  double shared_fraction = 0.8;  // requests that start with a system prompt
  double parallel_fraction = 0.1;  // requests with n = 2..4 parallel samples
  double cancel_fraction = 0.08;  // requests cancelled 1..40 steps after they arrive
  int initial_burst = 16;  // requests arriving at step 0; the rest arrive over time
  double arrivals_per_step = 0.1;  // mean arrival rate after the burst
  int max_model_len = 512;  // every request fits: prompt + max_tokens <= max_model_len
  int vocab_size = 512;
  uint64_t seed = 1;
  void validate() const;  // throws ConfigError naming the bad field
};

struct DemoRequest {
  int arrival_step = 0;
  int cancel_after_steps = -1;  // steps after arrival; -1: never cancelled
  int system_prompt = -1;  // index of the shared system prompt it starts with; -1: none
  GenerationRequest request;
};

// Deterministic 64-bit generator (splitmix64): the workload must not depend on the standard
// library's distributions, which differ between implementations.
class DemoRng {
 public:
  explicit DemoRng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1)
  int uniform_int(int lo, int hi);  // [lo, hi]
  int log_uniform_int(int lo, int hi);  // [lo, hi], uniform in log space: many short, a few long

 private:
  uint64_t state_;
};

// The requests, sorted by arrival step. With a tokenizer, prompts are English text in the style
// of the TinyStories models (so a real checkpoint produces readable continuations) and requests
// stop at BOS as llama2.c does; without one, prompts are random token ids (the built-in model's
// output is not language anyway) and only max_tokens stops them.
std::vector<DemoRequest> make_demo_workload(const DemoWorkloadConfig& config, const Tokenizer* tokenizer = nullptr);

}  // namespace pagedkv::demo
