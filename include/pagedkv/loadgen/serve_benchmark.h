// The load generator of `pagedkv bench serve`, in the shape of `vllm bench serve`: it sends a
// dataset's requests to an OpenAI-compatible server (streamed completions, one connection per
// request) at the arrival process's times, under an optional concurrency cap, and reports what
// vLLM's benchmark reports (throughput; mean, median and p99 of TTFT, TPOT, ITL and E2E latency)
// plus the prefix-cache hit rate: the servers' over the run, read from their /metrics, and the
// responses' own (usage.prompt_tokens_details.cached_tokens over prompt tokens).
//
// Given several servers (a cluster of instances without a router), request i goes to server
// i mod N: round-robin, the baseline a KV-aware router is measured against.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/loadgen/bench_dataset.h"

namespace pagedkv::loadgen {

struct ServeBenchOptions {
  std::vector<std::string> base_urls = {"http://127.0.0.1:8000"};  // requests round-robin over them
  // "/v1/completions" (token-id prompts) or "/v1/chat/completions" (each prompt's text, from the
  // server's /detokenize, as one user message).
  std::string endpoint = "/v1/completions";
  std::string model;  // empty: the server's first model
  std::string api_key;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: no cap
  bool ignore_eos = true;  // every request generates exactly max_tokens (vLLM's benchmark default)
  uint64_t seed = 0;
  double timeout_s = 600;  // per request
  // A request that gets no whole answer — a transport error, a 5xx, an error event, or a stream
  // cut before [DONE] — is sent again, whole, to the next base URL, up to this many times (a
  // client of a fleet retrying on another router). Its latencies count from the first attempt.
  int failover = 0;
};

struct LatencySummary {  // milliseconds
  double mean = 0, median = 0, p99 = 0;
};

struct ServeBenchReport {
  std::string model;
  int completed = 0;
  int failed = 0;
  int retried = 0;  // attempts sent again to another base URL (ServeBenchOptions::failover)
  std::vector<std::string> errors;  // the first few failures
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;  // completed requests per second
  double output_throughput = 0;  // output tokens per second
  double total_token_throughput = 0;
  LatencySummary ttft, tpot, itl, e2e;
  double prefix_cache_hit_rate = -1;  // hits / queries of the servers over the run (-1: unknown)
  int64_t total_cached_tokens = 0;  // prompt tokens the responses said came from a prefix cache
  double cached_token_rate = 0;  // total_cached_tokens / total_input_tokens (completed requests)
  // Hit tokens by the tier that held them (device, host, disk, remote), summed over the servers'
  // pagedkv:prefix_cache_hit_tokens_total over the run; empty for servers that lack the metric.
  std::vector<std::pair<std::string, double>> hit_tokens_by_tier;
  std::vector<int> completed_by_server;  // per base URL, in order
  // Each request's end-to-end latency in ms, in the order of the requests given (-1: failed).
  std::vector<double> e2e_ms_by_request;

  nlohmann::json to_json() const;
  std::string to_text() const;  // vllm bench serve's table
};

// A server's root URL as --base-url may give it: trailing slashes and an OpenAI-style "/v1" are
// dropped ("http://h:8000/v1/" -> "http://h:8000"), since the benchmark also calls /tokenize and
// /metrics beside /v1. Throws ConfigError for a URL that is not http:// or https://.
std::string normalize_base_url(std::string url);
// --endpoint: "completions" or "chat", or the path itself; the path. Throws ConfigError otherwise.
std::string endpoint_path(const std::string& name);

// What the benchmark needs from the server before it starts. Throw Error when it is unreachable.
std::string fetch_model_name(const std::string& base_url, const std::string& api_key);
int fetch_max_model_len(const std::string& base_url, const std::string& api_key);
// Real token ids of the served model (the server's /tokenize of a built-in English text) and what
// it puts before a text prompt (its /tokenize of the empty text with special tokens).
TokenPool fetch_token_pool(const std::string& base_url, const std::string& api_key);

// When each request is sent, in seconds from the start: a trace dataset's own arrival time, else
// the arrival process's (request_rate, burstiness, seed; all 0 at an infinite rate).
std::vector<double> send_times(const std::vector<BenchRequest>& requests, const ServeBenchOptions& options);

ServeBenchReport run_serve_benchmark(const std::vector<BenchRequest>& requests, const ServeBenchOptions& options);

// Mean, median and p99 in milliseconds of durations in seconds (percentiles interpolated between
// ranks, as numpy's and vLLM's); all zero for no samples.
LatencySummary summarize_ms(std::vector<double> seconds);

// Sum of the samples of metric `name` in a Prometheus text exposition whose label set contains
// `label` (e.g. `tier="remote"`; empty: every sample); -1 when there is none.
double metric_value(const std::string& text, const std::string& name, const std::string& label = "");

}  // namespace pagedkv::loadgen
