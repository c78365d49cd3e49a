// pagedkv bench decode: decode speed of a GGUF model against the memory-bandwidth limit.
//   A random-weight GGUF of a real model's shape (--shape, default Llama-3.2-1B) is written in each
//   of --types to a temporary directory with the project's GgufWriter (or --model names a file;
//   --tokenizer-from copies a GGUF's tokenizer into the generated files, so that servers can run
//   them), loaded as `serve` loads it (memory-mapped, weights kept in their stored type), and decoded
//   through the serving engine: B requests with --prompt-tokens-token prompts, greedy, and the
//   wall-clock time of --steps decode steps after the prefill step, for B in --batch-sizes.
//   The limit: a decode step reads every weight matrix once (the tied embedding as the output
//   matrix), so at batch 1 it cannot beat (weight bytes per step) / (read bandwidth), the
//   bandwidth being measured by a streaming read right before each round (the median of several
//   passes: the machine's share of it moves on a shared machine). Reported per batch size: medians and best of --rounds
//   rounds of tokens/s, the share of the bandwidth limit, and the throughput ratio to the first batch size of the same
//   round.
//   --prefill N measures the prefill instead: one request with an N-token prompt, the wall-clock
//   time from its admission to its first token (chunks of --max-num-batched-tokens, as `serve`
//   schedules it), reported as prompt tokens/s per round (llama-bench -p N's measure).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "command.h"
#include "pagedkv/core/cpu_clock.h"
#include "pagedkv/core/error.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/kernels/memory_bandwidth.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/format/random_gguf.h"
#include "pagedkv/model/gguf_model.h"
#include "run_statistics.h"

namespace pagedkv::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchDecodeOptions {
  std::string model;  // an existing GGUF; empty: generate --shape in each of --types
  std::string shape = "llama-3.2-1b";
  std::string tokenizer_from;  // a GGUF whose tokenizer.* keys the generated files get
  std::vector<std::string> types{"F16", "Q8_0"};
  std::string dir;  // where generated files go (default: the system's temporary directory)
  std::vector<int> batch_sizes{1, 32};
  int prompt_tokens = 8;  // short: the prefill of 32 prompts is not what is measured
  int steps = 8;
  int prefill = 0;  // > 0: measure the prefill of one prompt of this many tokens instead of decode
  int max_num_batched_tokens = 2048;  // --prefill: tokens per step (serve's default)
  int rounds = 5;
  double bandwidth_mib = 1024;
  int threads = 0;
  std::string clock = "wall";
  bool keep = false;
  bool json = false;
};

constexpr int kProbePasses = 5;  // read-bandwidth passes per round (after one warm-up pass)

double best(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

// Bytes a batch-1 decode step reads from the weights: every matrix once, of a mixture of experts
// only the experts a token uses; the token embedding only when it doubles as the output matrix
// (otherwise a step reads just its batch's rows of it).
double weight_bytes_per_step(const GgufFile& f, const ModelConfig& c) {
  const bool tied = f.find_tensor("output.weight") == nullptr;
  const double expert_share = c.n_experts > 0 ? static_cast<double>(c.n_experts_used) / c.n_experts : 1.0;
  double bytes = 0;
  for (const GgufTensor& t : f.tensors())
    if (t.name != "token_embd.weight" || tied)
      bytes += static_cast<double>(t.bytes) * (t.name.find("_exps.") != std::string::npos ? expert_share : 1.0);
  return bytes;
}

// Seconds of `steps` decode steps of `batch` requests (after their prefill step): wall-clock time,
// or with `cpu_clock` the calling thread's CPU time (one kernel thread: all the work runs on it).
double decode_seconds(const Model& model, int batch, int prompt_tokens, int steps, uint64_t seed, bool cpu_clock) {
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = model.config().num_kv_cache_groups() * batch * ((prompt_tokens + steps + 2) / c.block_size + 2) + 2;
  c.swap_space_bytes = 0;
  c.enable_prefix_caching = false;
  c.scheduler.max_num_seqs = batch;
  c.scheduler.max_num_batched_tokens = std::max(2048, batch * prompt_tokens);
  LLMEngine engine(model, c);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> token(3, model.config().vocab_size - 1);
  for (int i = 0; i < batch; ++i) {
    GenerationRequest g;
    g.prompt.push_back(1);
    for (int t = 1; t < prompt_tokens; ++t) g.prompt.push_back(token(rng));
    g.sampling.temperature = 0.0f;
    g.stop.max_tokens = steps + 1;  // the prefill step samples the first token
    engine.add_request(std::move(g));
  }
  engine.step();  // every prompt at once
  const auto t0 = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  int decode_steps = 0;
  while (engine.has_unfinished()) {
    engine.step();
    ++decode_steps;
  }
  const double secs =
      cpu_clock ? thread_cpu_seconds() - cpu0 : std::chrono::duration<double>(Clock::now() - t0).count();
  if (decode_steps != steps)
    throw Error(fmt::format("bench decode: expected {} decode steps, ran {}", steps, decode_steps));
  return secs;
}

// Seconds from the admission of one `prompt_tokens`-token request to its first sampled token: the
// prefill, in chunks of `max_batched` tokens per step.
double prefill_seconds(const Model& model, int prompt_tokens, int max_batched, uint64_t seed, bool cpu_clock) {
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = model.config().num_kv_cache_groups() * ((prompt_tokens + 2) / c.block_size + 2) + 2;
  c.swap_space_bytes = 0;
  c.enable_prefix_caching = false;
  c.scheduler.max_num_seqs = 1;
  c.scheduler.max_num_batched_tokens = max_batched;
  LLMEngine engine(model, c);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> token(3, model.config().vocab_size - 1);
  GenerationRequest g;
  g.prompt.push_back(1);
  for (int t = 1; t < prompt_tokens; ++t) g.prompt.push_back(token(rng));
  g.sampling.temperature = 0.0f;
  g.stop.max_tokens = 1;
  const auto t0 = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  engine.add_request(std::move(g));
  while (engine.has_unfinished()) engine.step();
  return cpu_clock ? thread_cpu_seconds() - cpu0 : std::chrono::duration<double>(Clock::now() - t0).count();
}

struct BatchResult {
  int batch = 0;
  std::vector<double> tokens_per_s, fraction_of_limit, vs_first;
};

int run_bench_decode(BenchDecodeOptions o) {
  if (o.threads > 0) set_kernel_threads(o.threads);
  if (o.rounds < 1 || o.steps < 1 || o.prompt_tokens < 1)
    throw ConfigError("--rounds, --steps and --prompt-tokens must be positive");
  if (o.prefill < 0 || o.max_num_batched_tokens < 1)
    throw ConfigError("--prefill must not be negative, --max-num-batched-tokens must be positive");
  if (o.clock != "wall" && o.clock != "cpu")
    throw ConfigError(fmt::format("--clock must be wall or cpu, got '{}'", o.clock));
  const bool cpu_clock = o.clock == "cpu";
  if (cpu_clock && kernel_threads() != 1)
    throw ConfigError(
        fmt::format("--clock cpu measures one thread's CPU time: add --threads 1 (now {} threads)", kernel_threads()));
  if (o.batch_sizes.empty()) throw ConfigError("--batch-sizes is empty");
  for (int b : o.batch_sizes)
    if (b < 1) throw ConfigError(fmt::format("--batch-sizes must be positive, got {}", b));
  if (!o.model.empty() && !std::filesystem::exists(o.model))
    throw ConfigError(fmt::format("--model '{}' does not exist", o.model));
  const RandomModelShape shape = random_model_shape(o.shape);
  std::unique_ptr<GgufFile> tokenizer;
  if (!o.tokenizer_from.empty()) {
    if (!o.model.empty()) throw ConfigError("--tokenizer-from applies to generated models, not to --model");
    if (!std::filesystem::exists(o.tokenizer_from))
      throw ConfigError(fmt::format("--tokenizer-from '{}' does not exist", o.tokenizer_from));
    tokenizer = std::make_unique<GgufFile>(o.tokenizer_from);
  }
  std::vector<WeightMix> types;
  for (const std::string& t : o.types) types.push_back(WeightMix::parse(t));
  const std::filesystem::path dir =
      o.dir.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(o.dir);

  ReadBandwidthProbe probe(static_cast<size_t>(o.bandwidth_mib * (1 << 20)), kernel_threads(), cpu_clock);
  nlohmann::json report;
  report["kernel_threads"] = kernel_threads();
  report["rounds"] = o.rounds;
  report["steps"] = o.steps;
  report["prompt_tokens"] = o.prompt_tokens;
  if (o.prefill > 0) {
    report["prefill_tokens"] = o.prefill;
    report["max_num_batched_tokens"] = o.max_num_batched_tokens;
  }
  report["clock"] = o.clock;
  if (!o.json && o.prefill > 0)
    fmt::print(
        "pagedkv bench decode --prefill: {} kernel threads, {} clock, {} rounds of one {}-token prompt's prefill "
        "(admission to first token, {} tokens per step)\n",
        kernel_threads(), o.clock, o.rounds, o.prefill, o.max_num_batched_tokens);
  else if (!o.json)
    fmt::print(
        "pagedkv bench decode: {} kernel threads, {} clock, {} rounds of {} decode steps after a {}-token prompt; "
        "limit = weight bytes per step / read bandwidth (median of {} passes over {} MiB before each round)\n",
        kernel_threads(), o.clock, o.rounds, o.steps, o.prompt_tokens, kProbePasses, probe.bytes() >> 20);

  const size_t cases = o.model.empty() ? types.size() : 1;
  for (size_t ci = 0; ci < cases; ++ci) {
    std::string path = o.model;
    double write_s = 0;
    if (o.model.empty()) {
      path = (dir / fmt::format("pagedkv-bench-{}-{}-{}.gguf", shape.name, types[ci].name(), ::getpid())).string();
      const auto t0 = Clock::now();
      write_random_gguf(shape, types[ci], 42, path, tokenizer.get());
      write_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    struct RemoveFile {
      std::string path;
      bool active;
      ~RemoveFile() {
        if (active) std::filesystem::remove(path);
      }
    } remover{path, o.model.empty() && !o.keep};
    const GgufModel model(path, std::max({256, o.prompt_tokens + o.steps + 16, o.prefill + 16}));
    const double bytes = weight_bytes_per_step(model.file(), model.config());
    const std::string name = o.model.empty() ? fmt::format("random {} {}", shape.name, types[ci].name())
                                             : std::filesystem::path(o.model).filename().string();
    if (o.prefill > 0) {
      prefill_seconds(model, std::min(o.prefill, 64), o.max_num_batched_tokens, 7,
                      cpu_clock);  // touch every weight page once
      std::vector<double> tokens_per_s;
      for (int round = 0; round < o.rounds; ++round)
        tokens_per_s.push_back(o.prefill / prefill_seconds(model, o.prefill, o.max_num_batched_tokens,
                                                           1000 + static_cast<uint64_t>(round), cpu_clock));
      report["models"].push_back({{"model", name},
                                  {"write_seconds", write_s},
                                  {"prefill",
                                   {{"tokens", o.prefill},
                                    {"tokens_per_s_median", median(tokens_per_s)},
                                    {"tokens_per_s_best", best(tokens_per_s)},
                                    {"runs_tokens_per_s", tokens_per_s}}}});
      if (!o.json)
        fmt::print("\n{} ({}){}\n  prefill of {} tokens: {:.1f} tokens/s median, {:.1f} best ({:.2f} s median)\n", name,
                   model.config().describe(),
                   o.model.empty() ? fmt::format(", written in {:.1f} s to {}", write_s, path) : "", o.prefill,
                   median(tokens_per_s), best(tokens_per_s), o.prefill / median(tokens_per_s));
      std::fflush(stdout);
      continue;
    }
    if (!o.json) {
      fmt::print("\n{} ({}){}\n  weights read per decode step: {:.3f} GB\n", name, model.config().describe(),
                 o.model.empty() ? fmt::format(", written in {:.1f} s to {}", write_s, path) : "", bytes / 1e9);
      fmt::print("  {:>5}  {:>9}  {:>9}  {:>10}  {:>9}  {:>13}  {:>9}\n", "batch", "bw GB/s", "step ms", "tok/s",
                 "best", "of bw limit", "vs first");
    }
    decode_seconds(model, 1, o.prompt_tokens, 2, 7, cpu_clock);  // touch every weight page once
    std::vector<BatchResult> results(o.batch_sizes.size());
    std::vector<double> bandwidth, step_ms_first;
    for (int round = 0; round < o.rounds; ++round) {
      // The median of several passes: a single pass (17-30 ms) on a shared machine read anywhere
      // from 45 to 79 GB/s from one round to the next.
      const double bw = measure_read_bandwidth(probe, kProbePasses).gbps_median;
      bandwidth.push_back(bw);
      double first = 0;
      for (size_t i = 0; i < o.batch_sizes.size(); ++i) {
        const int b = o.batch_sizes[i];
        const double secs =
            decode_seconds(model, b, o.prompt_tokens, o.steps, 1000 + static_cast<uint64_t>(round), cpu_clock);
        const double tps = b * o.steps / secs;
        if (i == 0) first = tps;
        results[i].batch = b;
        results[i].tokens_per_s.push_back(tps);
        results[i].fraction_of_limit.push_back((secs / o.steps) > 0 ? bytes / (secs / o.steps) / 1e9 / bw : 0.0);
        results[i].vs_first.push_back(tps / first);
      }
    }
    nlohmann::json entry{{"model", name},
                         {"weight_bytes_per_step", bytes},
                         {"read_bandwidth_gbps_median", median(bandwidth)},
                         {"read_bandwidth_gbps_best", best(bandwidth)},
                         {"read_bandwidth_gbps_runs", bandwidth},
                         {"write_seconds", write_s}};
    for (const BatchResult& r : results) {
      const double tps = median(r.tokens_per_s);
      entry["batches"].push_back({{"batch", r.batch},
                                  {"tokens_per_s_median", tps},
                                  {"tokens_per_s_best", best(r.tokens_per_s)},
                                  {"step_ms_median", 1e3 * r.batch / tps},
                                  // The step's weight traffic over the round's bandwidth: at batch 1 the
                                  // share of the limit; above it, how far past it batching goes.
                                  {"fraction_of_bandwidth_limit_median", median(r.fraction_of_limit)},
                                  {"fraction_of_bandwidth_limit_best", best(r.fraction_of_limit)},
                                  {"vs_first_batch_median", median(r.vs_first)},
                                  {"vs_first_batch_min", *std::min_element(r.vs_first.begin(), r.vs_first.end())},
                                  {"runs_tokens_per_s", r.tokens_per_s}});
      if (!o.json)
        fmt::print("  {:>5}  {:>9.1f}  {:>9.1f}  {:>10.2f}  {:>9.2f}  {:>6.0f}% ({:>3.0f}%)  {:>8.2f}x\n", r.batch,
                   median(bandwidth), 1e3 * r.batch / tps, tps, best(r.tokens_per_s), 100 * median(r.fraction_of_limit),
                   100 * best(r.fraction_of_limit), median(r.vs_first));
    }
    if (!o.json)
      fmt::print(
          "  (bw: median read bandwidth of the rounds, {:.1f}-{:.1f} GB/s; of bw limit: median (best); vs first: "
          "median of the per-round ratios to batch {})\n",
          *std::min_element(bandwidth.begin(), bandwidth.end()), best(bandwidth), o.batch_sizes.front());
    report["models"].push_back(std::move(entry));
    std::fflush(stdout);
  }
  if (o.json) fmt::print("{}\n", report.dump(2));
  return 0;
}

const CommandRegistration kBenchDecodeCommand{Command{
    "bench decode",
    "decode tokens/s of a GGUF model (by default a random Llama-3.2-1B) against the memory-bandwidth limit",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<BenchDecodeOptions>();
      sub.add_option("--model", o->model, "an existing GGUF file (default: generate --shape in each of --types)");
      sub.add_option("--shape", o->shape,
                     "shape of the generated model: llama-3.2-1b, qwen3moe-8l-32e, qwen3moe-8l-32e-dense (its "
                     "active weights as a dense model), tiny or tiny-moe")
          ->capture_default_str();
      sub.add_option("--tokenizer-from", o->tokenizer_from,
                     "a GGUF whose tokenizer the generated files get (its token count must be the shape's vocabulary)");
      sub.add_option("--types", o->types,
                     fmt::format("weight types of the generated models: {} (the K-quant and IQ4 mixes with "
                                 "llama-quantize's per-tensor rules)",
                                 WeightMix::names()))
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--dir", o->dir, "directory for the generated files (default: the temporary directory)");
      sub.add_flag("--keep", o->keep, "keep the generated files");
      sub.add_option("--batch-sizes", o->batch_sizes, "concurrent requests")->delimiter(',')->capture_default_str();
      sub.add_option("--prompt-tokens", o->prompt_tokens, "prompt length of each request")->capture_default_str();
      sub.add_option("--steps", o->steps, "timed decode steps per run")->capture_default_str();
      sub.add_option("--prefill", o->prefill,
                     "measure the prefill of one prompt of this many tokens instead of decode");
      sub.add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "--prefill: tokens per step (chunks)")
          ->capture_default_str();
      sub.add_option("--rounds", o->rounds, "rounds (bandwidth, then every batch size)")->capture_default_str();
      sub.add_option("--bandwidth-mib", o->bandwidth_mib, "buffer streamed to measure the read bandwidth")
          ->capture_default_str();
      sub.add_option("--threads", o->threads, "kernel threads (default: PAGEDKV_NUM_THREADS or the CPU count)");
      sub.add_option("--clock", o->clock,
                     "wall, or cpu: the thread's CPU time (needs --threads 1), steadier on a shared machine")
          ->capture_default_str();
      sub.add_flag("--json", o->json, "print the results as JSON");
      return [o] { return run_bench_decode(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
