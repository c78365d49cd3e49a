// The metrics of pagedkv serve, in Prometheus's text format 0.0.4 (GET /metrics).
//
// Names are vLLM's where they mean the same thing (`vllm:` prefix: its Grafana dashboard and the
// autoscalers that read it work unchanged), every series labelled model_name, histograms with
// vLLM v1's bucket bounds. What vLLM lacks is under `pagedkv:`. Counters and histograms are
// prometheus-cpp's (thread-safe): the engine thread updates them, HTTP threads render them.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {
class LLMEngine;
}

namespace pagedkv::server {

class ServerMetrics {
 public:
  ServerMetrics(std::string model_name, int max_model_len);

  std::string render() const;  // Prometheus text format 0.0.4

  // Engine thread, after every step: gauges, and the engine's cumulative counters as increments.
  void on_step(const LLMEngine& engine);

  // Per request (engine thread).
  void observe_first_token(double ttft_seconds, double queue_seconds);
  void observe_inter_token(double seconds, int tokens);  // `tokens` arrived together after `seconds`
  void observe_finished_sample(const std::string& finished_reason, int generation_tokens);
  // `prefill_seconds`: first scheduled to first token; `decode_seconds`: first token to the end;
  // `max_tokens`: the output tokens the request allowed (each prompt once, as vLLM counts).
  void observe_finished_request(double e2e_seconds, int prompt_tokens, int generation_tokens, double prefill_seconds,
                                double decode_seconds, int max_tokens);
  // One engine step's scheduled tokens (prefill chunks and decodes together).
  void observe_step_tokens(int tokens);
  void count_prompt(int prompt_tokens, const TierHitTokens& hits);
  // HTTP threads.
  void count_http_error(int status);
  void count_http_request(const std::string& endpoint);
  // A request with structured output: its grammar kind, and the seconds its HTTP thread spent
  // getting the compiled grammar (a compilation, a wait for another thread's, or a cache hit).
  void count_structured_output(const std::string& kind, double grammar_seconds);

  // Bucket bounds (exposed for tests).
  static std::vector<double> ttft_buckets();
  static std::vector<double> inter_token_buckets();
  static std::vector<double> request_latency_buckets();
  static std::vector<double> token_count_buckets(int max_model_len);  // 1, 2, 5, 10, 20, 50, ... <= max
  static std::vector<double> step_token_buckets();  // 1, 8, 16, 32, ..., 16384

 private:
  std::string model_name_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Labels labels_;
  // Gauges.
  prometheus::Gauge& running_;
  prometheus::Gauge& waiting_;
  prometheus::Gauge& swapped_;
  prometheus::Gauge& kv_usage_;
  prometheus::Family<prometheus::Gauge>& kv_blocks_;
  prometheus::Family<prometheus::Gauge>& tier_degraded_;
  // Counters fed from the engine's cumulative statistics.
  prometheus::Counter& prefix_queries_;
  prometheus::Counter& prefix_hits_;
  prometheus::Counter& preemptions_;
  prometheus::Counter& steps_;
  prometheus::Counter& swapped_out_blocks_;
  prometheus::Counter& swapped_in_blocks_;
  prometheus::Counter& cow_copies_;
  prometheus::Counter& evictions_;
  // Counters fed per request.
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generation_tokens_;
  prometheus::Family<prometheus::Counter>& request_success_;
  prometheus::Family<prometheus::Counter>& hit_tokens_by_tier_;
  prometheus::Family<prometheus::Counter>& http_errors_;
  prometheus::Family<prometheus::Counter>& http_requests_;
  prometheus::Family<prometheus::Counter>& structured_requests_;
  prometheus::Counter& grammar_seconds_;
  // Histograms.
  prometheus::Histogram& ttft_;
  prometheus::Histogram& inter_token_;
  prometheus::Histogram& e2e_;
  prometheus::Histogram& queue_time_;
  prometheus::Histogram& request_prompt_tokens_;
  prometheus::Histogram& request_generation_tokens_;
  prometheus::Histogram& prefill_time_;
  prometheus::Histogram& decode_time_;
  prometheus::Histogram& max_generation_tokens_;
  prometheus::Histogram& iteration_tokens_;
  std::chrono::steady_clock::time_point last_block_census_{};  // kv_blocks' cached/free split
  // The engine's cumulative values at the previous on_step (to turn them into increments).
  struct EngineTotals {
    double prefix_queries = 0, prefix_hits = 0, preemptions = 0, steps = 0, swapped_out = 0, swapped_in = 0, cow = 0,
           evictions = 0;
  } last_;
};

}  // namespace pagedkv::server
