#include "pagedkv/server/server_metrics.h"

#include <prometheus/text_serializer.h>

#include "pagedkv/engine/llm_engine.h"

namespace pagedkv::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

}  // namespace

std::vector<double> ServerMetrics::ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> ServerMetrics::inter_token_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> ServerMetrics::request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::vector<double> ServerMetrics::token_count_buckets(int max_model_len) {
  std::vector<double> b;
  for (double scale = 1;; scale *= 10)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > max_model_len) return b;
      b.push_back(m * scale);
    }
}

std::vector<double> ServerMetrics::step_token_buckets() {
  return {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

ServerMetrics::ServerMetrics(std::string model_name, int max_model_len)
    : model_name_(std::move(model_name)),
      registry_(std::make_shared<prometheus::Registry>()),
      labels_{{"model_name", model_name_}},
      running_(BuildGauge()
                   .Name("vllm:num_requests_running")
                   .Help("Number of requests in model execution batches.")
                   .Register(*registry_)
                   .Add(labels_)),
      waiting_(BuildGauge()
                   .Name("vllm:num_requests_waiting")
                   .Help("Number of requests waiting to be processed.")
                   .Register(*registry_)
                   .Add(labels_)),
      swapped_(BuildGauge()
                   .Name("pagedkv:num_requests_swapped")
                   .Help("Number of requests swapped out to the host or disk tier.")
                   .Register(*registry_)
                   .Add(labels_)),
      kv_usage_(BuildGauge()
                    .Name("vllm:kv_cache_usage_perc")
                    .Help("KV-cache usage. 1 means 100 percent usage.")
                    .Register(*registry_)
                    .Add(labels_)),
      kv_blocks_(BuildGauge()
                     .Name("pagedkv:kv_blocks")
                     .Help("Device KV blocks by state: used (held by requests), cached_free (reusable prefix blocks in "
                           "the LRU queue), free.")
                     .Register(*registry_)),
      tier_degraded_(BuildGauge()
                         .Name("pagedkv:tier_degraded")
                         .Help("1 when a KV tier stopped taking writes after an error.")
                         .Register(*registry_)),
      prefix_queries_(BuildCounter()
                          .Name("vllm:prefix_cache_queries_total")
                          .Help("Prefix-cache queries, in terms of number of queried tokens.")
                          .Register(*registry_)
                          .Add(labels_)),
      prefix_hits_(BuildCounter()
                       .Name("vllm:prefix_cache_hits_total")
                       .Help("Prefix-cache hits, in terms of number of cached tokens.")
                       .Register(*registry_)
                       .Add(labels_)),
      preemptions_(BuildCounter()
                       .Name("vllm:num_preemptions_total")
                       .Help("Cumulative number of preemptions from the engine.")
                       .Register(*registry_)
                       .Add(labels_)),
      steps_(BuildCounter()
                 .Name("pagedkv:engine_steps_total")
                 .Help("Engine steps (one forward pass each).")
                 .Register(*registry_)
                 .Add(labels_)),
      swapped_out_blocks_(BuildCounter()
                              .Name("pagedkv:swapped_out_blocks_total")
                              .Help("KV blocks swapped out by swap preemption.")
                              .Register(*registry_)
                              .Add(labels_)),
      swapped_in_blocks_(BuildCounter()
                             .Name("pagedkv:swapped_in_blocks_total")
                             .Help("KV blocks swapped back in.")
                             .Register(*registry_)
                             .Add(labels_)),
      cow_copies_(BuildCounter()
                      .Name("pagedkv:cow_copies_total")
                      .Help("Copy-on-write block copies.")
                      .Register(*registry_)
                      .Add(labels_)),
      evictions_(BuildCounter()
                     .Name("pagedkv:evictions_total")
                     .Help("Cached device blocks whose content was dropped to reuse them.")
                     .Register(*registry_)
                     .Add(labels_)),
      prompt_tokens_(BuildCounter()
                         .Name("vllm:prompt_tokens_total")
                         .Help("Number of prefill tokens processed.")
                         .Register(*registry_)
                         .Add(labels_)),
      generation_tokens_(BuildCounter()
                             .Name("vllm:generation_tokens_total")
                             .Help("Number of generation tokens processed.")
                             .Register(*registry_)
                             .Add(labels_)),
      request_success_(BuildCounter()
                           .Name("vllm:request_success_total")
                           .Help("Count of successfully processed requests (one per choice), by finish reason.")
                           .Register(*registry_)),
      hit_tokens_by_tier_(BuildCounter()
                              .Name("pagedkv:prefix_cache_hit_tokens_total")
                              .Help("Prompt tokens found in the prefix cache at admission, by the tier that held them.")
                              .Register(*registry_)),
      http_errors_(BuildCounter()
                       .Name("pagedkv:http_errors_total")
                       .Help("HTTP responses with an error status, by status.")
                       .Register(*registry_)),
      http_requests_(
          BuildCounter().Name("pagedkv:http_requests_total").Help("HTTP requests, by endpoint.").Register(*registry_)),
      structured_requests_(BuildCounter()
                               .Name("pagedkv:structured_output_requests_total")
                               .Help("Requests with structured output (a grammar), by grammar kind.")
                               .Register(*registry_)),
      grammar_seconds_(
          BuildCounter()
              .Name("pagedkv:grammar_compile_seconds_total")
              .Help("Seconds HTTP threads spent getting compiled grammars (compiling, or waiting for a cache entry).")
              .Register(*registry_)
              .Add(labels_)),
      ttft_(BuildHistogram()
                .Name("vllm:time_to_first_token_seconds")
                .Help("Histogram of time to first token in seconds.")
                .Register(*registry_)
                .Add(labels_, ttft_buckets())),
      inter_token_(BuildHistogram()
                       .Name("vllm:inter_token_latency_seconds")
                       .Help("Histogram of inter-token latency in seconds.")
                       .Register(*registry_)
                       .Add(labels_, inter_token_buckets())),
      e2e_(BuildHistogram()
               .Name("vllm:e2e_request_latency_seconds")
               .Help("Histogram of e2e request latency in seconds.")
               .Register(*registry_)
               .Add(labels_, request_latency_buckets())),
      queue_time_(BuildHistogram()
                      .Name("vllm:request_queue_time_seconds")
                      .Help("Histogram of time spent in WAITING phase for request.")
                      .Register(*registry_)
                      .Add(labels_, request_latency_buckets())),
      request_prompt_tokens_(BuildHistogram()
                                 .Name("vllm:request_prompt_tokens")
                                 .Help("Number of prefill tokens processed.")
                                 .Register(*registry_)
                                 .Add(labels_, token_count_buckets(max_model_len))),
      request_generation_tokens_(BuildHistogram()
                                     .Name("vllm:request_generation_tokens")
                                     .Help("Number of generation tokens processed.")
                                     .Register(*registry_)
                                     .Add(labels_, token_count_buckets(max_model_len))),
      prefill_time_(BuildHistogram()
                        .Name("vllm:request_prefill_time_seconds")
                        .Help("Histogram of time spent in PREFILL phase for request.")
                        .Register(*registry_)
                        .Add(labels_, request_latency_buckets())),
      decode_time_(BuildHistogram()
                       .Name("vllm:request_decode_time_seconds")
                       .Help("Histogram of time spent in DECODE phase for request.")
                       .Register(*registry_)
                       .Add(labels_, request_latency_buckets())),
      max_generation_tokens_(BuildHistogram()
                                 .Name("vllm:request_max_num_generation_tokens")
                                 .Help("Histogram of maximum number of requested generation tokens.")
                                 .Register(*registry_)
                                 .Add(labels_, token_count_buckets(max_model_len))),
      iteration_tokens_(BuildHistogram()
                            .Name("vllm:iteration_tokens_total")
                            .Help("Histogram of number of tokens per engine_step.")
                            .Register(*registry_)
                            .Add(labels_, step_token_buckets())) {
  // Series that exist from the start, so a dashboard sees zeros rather than nothing.
  for (const char* reason : {"stop", "length", "abort"})
    request_success_.Add({{"model_name", model_name_}, {"finished_reason", reason}});
  for (const char* tier : {"device", "host", "disk", "remote"})
    hit_tokens_by_tier_.Add({{"model_name", model_name_}, {"tier", tier}});
}

std::string ServerMetrics::render() const { return prometheus::TextSerializer().Serialize(registry_->Collect()); }

void ServerMetrics::on_step(const LLMEngine& engine) {
  const Scheduler& s = engine.scheduler();
  const KVCacheManager& m = engine.manager();
  running_.Set(s.num_running());
  waiting_.Set(s.num_waiting());
  swapped_.Set(s.num_swapped());
  kv_usage_.Set(m.usage());
  // The block census (used / cached but free / empty) walks the whole pool to split the free
  // blocks: at most every 100 ms while requests run (scrapes come seconds apart), and always once
  // the engine goes idle. The three states are set together so they always sum to the pool.
  const BlockPool& pool = m.pool();
  const auto now_time = std::chrono::steady_clock::now();
  if (!engine.has_unfinished() || now_time - last_block_census_ >= std::chrono::milliseconds(100)) {
    last_block_census_ = now_time;
    const int free = pool.num_free_blocks();
    int cached_free = 0;
    for (const KVCacheBlock& b : pool.blocks()) cached_free += (!b.is_null && b.ref_cnt == 0 && b.has_hash) ? 1 : 0;
    kv_blocks_.Add({{"model_name", model_name_}, {"state", "used"}}).Set(pool.num_usable_blocks() - free);
    kv_blocks_.Add({{"model_name", model_name_}, {"state", "cached_free"}}).Set(cached_free);
    kv_blocks_.Add({{"model_name", model_name_}, {"state", "free"}}).Set(free - cached_free);
  }
  if (const TieredKVCache* tiers = engine.tiers()) {
    if (tiers->has_host())
      tier_degraded_.Add({{"model_name", model_name_}, {"tier", "host"}}).Set(tiers->host()->stats().degraded ? 1 : 0);
    if (tiers->has_disk())
      tier_degraded_.Add({{"model_name", model_name_}, {"tier", "disk"}}).Set(tiers->disk()->stats().degraded ? 1 : 0);
    if (tiers->has_remote())
      tier_degraded_.Add({{"model_name", model_name_}, {"tier", "remote"}}).Set(tiers->remote()->degraded() ? 1 : 0);
  }
  const PrefixCacheStats& p = m.prefix_cache_stats();
  const SchedulerStats& ss = s.stats();
  const EngineTotals now{static_cast<double>(p.queries),
                         static_cast<double>(p.hits),
                         static_cast<double>(ss.preemptions_recompute + ss.preemptions_swap),
                         static_cast<double>(engine.stats().steps),
                         static_cast<double>(ss.blocks_swapped_out),
                         static_cast<double>(ss.blocks_swapped_in),
                         static_cast<double>(engine.stats().cow_copies),
                         static_cast<double>(pool.stats().evictions)};
  auto advance = [](prometheus::Counter& c, double now_value, double last_value) {
    if (now_value > last_value) c.Increment(now_value - last_value);
  };
  advance(prefix_queries_, now.prefix_queries, last_.prefix_queries);
  advance(prefix_hits_, now.prefix_hits, last_.prefix_hits);
  advance(preemptions_, now.preemptions, last_.preemptions);
  advance(steps_, now.steps, last_.steps);
  advance(swapped_out_blocks_, now.swapped_out, last_.swapped_out);
  advance(swapped_in_blocks_, now.swapped_in, last_.swapped_in);
  advance(cow_copies_, now.cow, last_.cow);
  advance(evictions_, now.evictions, last_.evictions);
  last_ = now;
}

void ServerMetrics::observe_first_token(double ttft_seconds, double queue_seconds) {
  ttft_.Observe(ttft_seconds);
  if (queue_seconds >= 0) queue_time_.Observe(queue_seconds);
}

void ServerMetrics::observe_inter_token(double seconds, int tokens) {
  // Tokens that arrive together share the gap (vLLM observes one latency per decode step).
  for (int i = 0; i < tokens; ++i) inter_token_.Observe(seconds / tokens);
}

void ServerMetrics::observe_finished_sample(const std::string& finished_reason, int generation_tokens) {
  request_success_.Add({{"model_name", model_name_}, {"finished_reason", finished_reason}}).Increment();
  generation_tokens_.Increment(generation_tokens);
}

void ServerMetrics::observe_finished_request(double e2e_seconds, int prompt_tokens, int generation_tokens,
                                             double prefill_seconds, double decode_seconds, int max_tokens) {
  e2e_.Observe(e2e_seconds);
  request_prompt_tokens_.Observe(prompt_tokens);
  request_generation_tokens_.Observe(generation_tokens);
  prefill_time_.Observe(prefill_seconds);
  decode_time_.Observe(decode_seconds);
  max_generation_tokens_.Observe(max_tokens);
}

void ServerMetrics::observe_step_tokens(int tokens) { iteration_tokens_.Observe(tokens); }

void ServerMetrics::count_prompt(int prompt_tokens, const TierHitTokens& hits) {
  prompt_tokens_.Increment(prompt_tokens);
  hit_tokens_by_tier_.Add({{"model_name", model_name_}, {"tier", "device"}}).Increment(hits.device);
  hit_tokens_by_tier_.Add({{"model_name", model_name_}, {"tier", "host"}}).Increment(hits.host);
  hit_tokens_by_tier_.Add({{"model_name", model_name_}, {"tier", "disk"}}).Increment(hits.disk);
  hit_tokens_by_tier_.Add({{"model_name", model_name_}, {"tier", "remote"}}).Increment(hits.remote);
}

void ServerMetrics::count_http_error(int status) {
  http_errors_.Add({{"model_name", model_name_}, {"status", std::to_string(status)}}).Increment();
}

void ServerMetrics::count_structured_output(const std::string& kind, double grammar_seconds) {
  structured_requests_.Add({{"model_name", model_name_}, {"kind", kind}}).Increment();
  grammar_seconds_.Increment(grammar_seconds);
}

void ServerMetrics::count_http_request(const std::string& endpoint) {
  http_requests_.Add({{"model_name", model_name_}, {"endpoint", endpoint}}).Increment();
}

}  // namespace pagedkv::server
