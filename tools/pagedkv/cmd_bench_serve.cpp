// pagedkv bench serve: a load generator for OpenAI-compatible servers (pagedkv serve, vllm serve),
// one or several (round-robin), in the shape of `vllm bench serve`: datasets random,
// prefix-repetition and mooncake; Poisson or gamma arrivals; a concurrency cap; TTFT / TPOT / ITL /
// E2E percentiles; the servers' prefix-cache hit rate. Text report, or --json.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "command.h"
#include "on_off_flag.h"
#include "engine_options.h"
#include "pagedkv/core/error.h"
#include "pagedkv/loadgen/bench_dataset.h"
#include "pagedkv/loadgen/serve_benchmark.h"

namespace pagedkv::cli {
namespace {

struct BenchServeOptions {
  loadgen::ServeBenchOptions run;
  std::string request_rate = "inf";
  std::string endpoint = "completions";
  std::string dataset = "random";
  int num_prompts = 200;
  loadgen::RandomDatasetOptions random;
  loadgen::PrefixRepetitionOptions prefix;
  loadgen::MooncakeDatasetOptions mooncake;
  std::string dataset_path;
  std::string save_requests;
  bool json = false;
};

// The requests as a pagedkv JSONL trace ({"timestamp" ms, "tokens", "output_length"} a line, and
// "latency_ms", the end-to-end time measured, for requests that completed), so `pagedkv replay FILE
// --mode cluster` predicts the hit rate of exactly the prompts that were sent (its kv router needs
// the latencies: they say which requests were in flight when another arrived).
void save_requests(const std::vector<loadgen::BenchRequest>& requests, const loadgen::ServeBenchOptions& run,
                   const loadgen::ServeBenchReport& report, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(fmt::format("cannot write '{}'", path));
  const std::vector<double> times = loadgen::send_times(requests, run);
  for (size_t i = 0; i < requests.size(); ++i) {
    nlohmann::json line{
        {"timestamp", 1e3 * times[i]}, {"tokens", requests[i].prompt}, {"output_length", requests[i].max_tokens}};
    if (i < report.e2e_ms_by_request.size() && report.e2e_ms_by_request[i] >= 0)
      line["latency_ms"] = report.e2e_ms_by_request[i];
    out << line.dump() << '\n';
  }
  if (!out.flush()) throw Error(fmt::format("cannot write '{}'", path));
}

int run_bench_serve(BenchServeOptions o) {
  o.run.request_rate = o.request_rate == "inf" ? std::numeric_limits<double>::infinity() : std::stod(o.request_rate);
  if (o.num_prompts < 1) throw ConfigError("--num-prompts must be at least 1");
  if (!(o.run.timeout_s > 0)) throw ConfigError("--request-timeout-s must be positive");
  for (std::string& url : o.run.base_urls) url = loadgen::normalize_base_url(url);
  o.run.endpoint = loadgen::endpoint_path(o.endpoint);
  const loadgen::TokenPool pool = loadgen::fetch_token_pool(o.run.base_urls.front(), o.run.api_key);
  std::vector<loadgen::BenchRequest> requests;
  if (o.dataset == "random") {
    o.random.num_prompts = o.num_prompts;
    requests = loadgen::random_dataset(pool, o.random, o.run.seed);
  } else if (o.dataset == "prefix-repetition") {
    o.prefix.num_prompts = o.num_prompts;
    requests = loadgen::prefix_repetition_dataset(pool, o.prefix, o.run.seed);
  } else if (o.dataset == "mooncake") {
    o.mooncake.num_prompts = o.num_prompts;
    o.mooncake.max_model_len = loadgen::fetch_max_model_len(o.run.base_urls.front(), o.run.api_key);
    if (o.dataset_path.empty()) o.dataset_path = default_shared_dir() + "/traces/mooncake_conversation_trace.jsonl";
    requests = loadgen::mooncake_dataset(o.dataset_path, pool, o.mooncake, o.run.seed);
  } else {
    throw ConfigError(fmt::format("--dataset must be random, prefix-repetition or mooncake, got '{}'", o.dataset));
  }
  const loadgen::ServeBenchReport report = loadgen::run_serve_benchmark(requests, o.run);
  if (!o.save_requests.empty()) save_requests(requests, o.run, report, o.save_requests);
  if (o.json) fmt::print("{}\n", report.to_json().dump(2));
  else fmt::print("{}", report.to_text());
  return report.failed == 0 ? 0 : 1;
}

const CommandRegistration kBenchServeCommand{Command{
    "bench serve", "load an OpenAI-compatible server like vllm bench serve: throughput, TTFT, TPOT, ITL, E2E",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<BenchServeOptions>();
      sub.add_option(
             "--base-url", o->run.base_urls,
             "the server's root (a trailing /v1 is dropped); repeat it for a cluster (requests round-robin over them)")
          ->capture_default_str();
      sub.add_option("--endpoint", o->endpoint,
                     "completions (/v1/completions, token-id prompts) or chat (/v1/chat/completions, each prompt's "
                     "text as a user message)")
          ->capture_default_str();
      sub.add_option("--model", o->run.model, "model name (default: the server's first)");
      sub.add_option("--api-key", o->run.api_key, "sent as 'Authorization: Bearer KEY'");
      sub.add_option("--num-prompts", o->num_prompts, "requests to send")->capture_default_str();
      sub.add_option("--request-rate", o->request_rate, "mean requests per second, or inf (all at once)")
          ->capture_default_str();
      sub.add_option("--burstiness", o->run.burstiness, "gamma shape of the gaps (1 = Poisson)")->capture_default_str();
      sub.add_option("--max-concurrency", o->run.max_concurrency, "requests in flight at most (0: no cap)")
          ->capture_default_str();
      sub.add_option("--failover", o->run.failover,
                     "send a request that got no whole answer (transport error, 5xx, error event, cut stream) again "
                     "to the next --base-url, up to N times")
          ->capture_default_str();
      sub.add_option("--request-timeout-s", o->run.timeout_s,
                     "seconds a request may take, first byte to last, before it counts as failed")
          ->capture_default_str();
      sub.add_option("--seed", o->run.seed, "seed of the dataset and the arrivals")->capture_default_str();
      add_on_off_flag(sub, "--ignore-eos", "--no-ignore-eos", o->run.ignore_eos,
                      "generate exactly the requested output lengths, as vllm bench serve does");
      sub.add_option("--dataset", o->dataset, "random, prefix-repetition or mooncake")->capture_default_str();
      sub.add_option("--random-input-len", o->random.input_len, "random: prompt tokens")->capture_default_str();
      sub.add_option("--random-output-len", o->random.output_len, "random: output tokens")->capture_default_str();
      sub.add_option("--random-range-ratio", o->random.range_ratio, "random: lengths uniform in len x [1-r, 1+r]")
          ->capture_default_str();
      sub.add_option("--prefix-repetition-num-prefixes", o->prefix.num_prefixes, "distinct shared prefixes")
          ->capture_default_str();
      sub.add_option("--prefix-repetition-prefix-len", o->prefix.prefix_len, "tokens per prefix")
          ->capture_default_str();
      sub.add_option("--prefix-repetition-suffix-len", o->prefix.suffix_len, "distinct tokens after it")
          ->capture_default_str();
      sub.add_option("--prefix-repetition-output-len", o->prefix.output_len, "output tokens")->capture_default_str();
      sub.add_option("--dataset-path", o->dataset_path,
                     "mooncake: the trace (default ../shared/traces/mooncake_conversation_trace.jsonl)");
      sub.add_option("--time-scale", o->mooncake.time_scale, "mooncake: arrival = timestamp x scale")
          ->capture_default_str();
      sub.add_option("--mooncake-block-tokens", o->mooncake.block_tokens,
                     "mooncake: tokens per 512-token hash-id block")
          ->capture_default_str();
      sub.add_option("--save-requests", o->save_requests,
                     "also write the requests sent as a pagedkv JSONL trace (for pagedkv replay)");
      sub.add_flag("--json", o->json, "the report as JSON");
      return [o] { return run_bench_serve(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
