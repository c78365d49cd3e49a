// pagedkv bench engine: the serving engine end to end.
//   1. throughput: B requests with short distinct prompts decode --max-tokens tokens each through
//      one engine (one forward pass per step over all of them), for B in --batch-sizes, on the
//      stories260K checkpoint (when found) and on the built-in random model. Reported: output
//      tokens per second of wall-clock time and per second of process CPU time, the CPU-time
//      ratio to the first batch size in the same run, and the scheduler's own share of step time
//      (scheduling, the KV-cache manager and batch building, against the whole step).
//   2. prefix caching: requests that share a long system prompt arrive one per step; time to
//      first token with prefix caching on and off, and the ratio.
// Every case runs --repeats times and reports the median.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "engine_options.h"
#include "run_statistics.h"
#include "pagedkv/core/cpu_clock.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/percentile.h"
#include "pagedkv/demo/demo_workload.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/random_model.h"

namespace pagedkv::cli {
namespace {

using demo::DemoRng;

using Clock = std::chrono::steady_clock;

struct BenchEngineOptions {
  std::string model;  // default: ../shared/models/stories260K.bin when present
  std::vector<int> batch_sizes{1, 2, 4, 8, 16, 32, 64};
  int prompt_tokens = 16;
  int max_tokens = 128;
  int system_prompt_tokens = 384;
  int ttft_requests = 32;
  int repeats = 3;
  int block_size = 16;
  int threads = 0;
  bool skip_builtin = false;
  bool with_hybrid = false;
  bool json = false;
};

// A pool that never preempts: every request's whole sequence fits at once, in every KV-cache
// group (a model with sliding-window layers has two).
EngineConfig roomy_config(const Model& model, int block_size, int requests, int tokens_per_request) {
  EngineConfig c;
  c.block_size = block_size;
  c.num_blocks =
      model.config().num_kv_cache_groups() * requests * ((tokens_per_request + block_size - 1) / block_size + 1) + 2;
  c.swap_space_bytes = 0;
  c.scheduler.max_num_seqs = std::max(requests, 1);
  c.scheduler.max_num_batched_tokens = std::max(2048, requests * tokens_per_request);
  return c;
}

struct ThroughputResult {
  double output_tokens_per_s = 0;
  double output_tokens_per_cpu_s = 0;
  double scheduler_fraction = 0;
  double step_ms = 0;
};

ThroughputResult run_throughput(const Model& model, const BenchEngineOptions& o, int batch, uint64_t seed) {
  const int prompt = std::min(o.prompt_tokens, model.config().seq_len / 2);
  const int max_tokens = std::min(o.max_tokens, model.config().seq_len - prompt);
  LLMEngine engine(model, roomy_config(model, o.block_size, batch, prompt + max_tokens));
  DemoRng rng(seed);
  for (int i = 0; i < batch; ++i) {
    GenerationRequest g;
    g.prompt.push_back(1);
    for (int t = 1; t < prompt; ++t) g.prompt.push_back(rng.uniform_int(3, model.config().vocab_size - 1));
    g.sampling.temperature = 1.0f;
    g.sampling.seed = rng.next() | 1;
    g.stop.max_tokens = max_tokens;  // no EOS: every request decodes exactly max_tokens
    engine.add_request(std::move(g));
  }
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  engine.run_to_completion();
  const double cpu = process_cpu_seconds() - cpu0;
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const EngineStats& s = engine.stats();
  const double step = s.schedule_seconds + s.copy_seconds + s.forward_seconds;
  const auto tokens = static_cast<double>(s.output_tokens);
  return {tokens / secs, tokens / cpu, step > 0 ? s.schedule_seconds / step : 0.0,
          1e3 * step / static_cast<double>(std::max<uint64_t>(1, s.steps))};
}

struct TtftResult {
  double ttft_p50_ms = 0;
  double ttft_mean_ms = 0;
  uint64_t prompt_tokens_computed = 0;
};

// Requests = shared system prompt + a distinct 16-token question, one arriving per step.
TtftResult run_ttft(const Model& model, const BenchEngineOptions& o, bool caching) {
  const int system = std::min(o.system_prompt_tokens, model.config().seq_len / 2);
  const int question = 16, max_tokens = 16;
  EngineConfig cfg = roomy_config(model, o.block_size, o.ttft_requests, system + question + max_tokens);
  cfg.enable_prefix_caching = caching;
  LLMEngine engine(model, cfg);
  DemoRng rng(42);
  std::vector<TokenId> system_prompt{1};
  for (int t = 1; t < system; ++t) system_prompt.push_back(rng.uniform_int(3, model.config().vocab_size - 1));
  std::vector<double> ttft;
  int submitted = 0;
  while (submitted < o.ttft_requests || engine.has_unfinished()) {
    if (submitted < o.ttft_requests) {
      GenerationRequest g;
      g.prompt = system_prompt;
      for (int t = 0; t < question; ++t) g.prompt.push_back(rng.uniform_int(3, model.config().vocab_size - 1));
      g.sampling.temperature = 0.0f;
      g.stop.max_tokens = max_tokens;
      engine.add_request(std::move(g));
      ++submitted;
    }
    for (const RequestOutput& out : engine.step())
      if (out.finished && out.ttft_ms >= 0) ttft.push_back(out.ttft_ms);
  }
  double sum = 0;
  for (double t : ttft) sum += t;
  return {percentile(ttft, 50), ttft.empty() ? 0.0 : sum / static_cast<double>(ttft.size()),
          engine.stats().prompt_tokens_computed};
}

int run_bench_engine(BenchEngineOptions o) {
  if (o.threads > 0) set_kernel_threads(o.threads);
  if (o.repeats < 1) throw ConfigError(fmt::format("--repeats must be at least 1, got {}", o.repeats));
  for (int b : o.batch_sizes)
    if (b < 1) throw ConfigError(fmt::format("--batch-sizes must be positive, got {}", b));
  if (o.prompt_tokens < 1 || o.max_tokens < 1)
    throw ConfigError(fmt::format("--prompt-tokens and --max-tokens must be positive (got {} and {})", o.prompt_tokens,
                                  o.max_tokens));

  struct Named {
    std::string name;
    std::unique_ptr<Model> model;
  };
  std::vector<Named> models;
  std::string checkpoint = o.model.empty() ? default_shared_dir() + "/models/stories260K.bin" : o.model;
  const std::string name = o.model.empty() ? "stories260K" : std::filesystem::path(o.model).stem().string();
  if (std::filesystem::exists(checkpoint)) {
    if (GgufFile::has_gguf_magic(checkpoint)) models.push_back({name, std::make_unique<GgufModel>(checkpoint)});
    else models.push_back({name, std::make_unique<Llama2cCheckpoint>(checkpoint)});
  } else if (!o.model.empty()) throw ConfigError(fmt::format("--model '{}' does not exist", o.model));
  else fmt::print(stderr, "bench engine: {} not found; only the built-in model runs\n", checkpoint);
  if (!o.skip_builtin) models.push_back({"builtin", make_random_model(builtin_random_model_config(), 7)});
  if (o.with_hybrid) models.push_back({"builtin-hybrid", make_random_model(builtin_random_hybrid_model_config(), 7)});

  nlohmann::json report;
  report["kernel_threads"] = kernel_threads();
  report["repeats"] = o.repeats;
  report["prompt_tokens"] = o.prompt_tokens;
  report["max_tokens"] = o.max_tokens;
  if (!o.json)
    fmt::print(
        "pagedkv bench engine: {} kernel threads, medians of {} runs; each request: {}-token prompt, "
        "{} output tokens\n",
        kernel_threads(), o.repeats, o.prompt_tokens, o.max_tokens);
  for (const Named& m : models) {
    if (!o.json) {
      fmt::print("\n{} ({})\n", m.name, m.model->config().describe());
      fmt::print("  {:>5}  {:>12}  {:>14}  {:>10}  {:>9}  {:>11}\n", "batch", "output tok/s", "tok/CPU-second",
                 "vs first", "step ms", "scheduler %");
    }
    double base = 0;
    for (int b : o.batch_sizes) {
      std::vector<double> tps, tpc, frac, step_ms;
      for (int r = 0; r < o.repeats; ++r) {
        const ThroughputResult t = run_throughput(*m.model, o, b, 1000 + static_cast<uint64_t>(r));
        tps.push_back(t.output_tokens_per_s);
        tpc.push_back(t.output_tokens_per_cpu_s);
        frac.push_back(t.scheduler_fraction);
        step_ms.push_back(t.step_ms);
      }
      const double med = median(tps), med_cpu = median(tpc);
      if (base == 0) base = med_cpu;  // ratios on CPU time: the shared machine's share varies
      report["throughput"].push_back({{"model", m.name},
                                      {"batch", b},
                                      {"output_tokens_per_s", med},
                                      {"output_tokens_per_cpu_s", med_cpu},
                                      {"cpu_vs_first_batch", med_cpu / base},
                                      {"step_ms", median(step_ms)},
                                      {"scheduler_fraction", median(frac)},
                                      {"runs_output_tokens_per_s", tps}});
      if (!o.json)
        fmt::print("  {:>5}  {:>12.0f}  {:>14.0f}  {:>9.2f}x  {:>9.3f}  {:>10.2f}%\n", b, med, med_cpu, med_cpu / base,
                   median(step_ms), 100 * median(frac));
      std::fflush(stdout);
    }
    std::vector<double> on, off;
    uint64_t computed_on = 0, computed_off = 0;
    for (int r = 0; r < o.repeats; ++r) {
      const TtftResult a = run_ttft(*m.model, o, true), c = run_ttft(*m.model, o, false);
      on.push_back(a.ttft_p50_ms);
      off.push_back(c.ttft_p50_ms);
      computed_on = a.prompt_tokens_computed;
      computed_off = c.prompt_tokens_computed;
    }
    const int system = std::min(o.system_prompt_tokens, m.model->config().seq_len / 2);
    report["ttft"].push_back({{"model", m.name},
                              {"requests", o.ttft_requests},
                              {"system_prompt_tokens", system},
                              {"ttft_p50_ms_caching", median(on)},
                              {"ttft_p50_ms_no_caching", median(off)},
                              {"no_caching_over_caching", median(off) / median(on)},
                              {"prompt_tokens_computed_caching", computed_on},
                              {"prompt_tokens_computed_no_caching", computed_off}});
    if (!o.json)
      fmt::print(
          "  time to first token, {} requests behind a {}-token system prompt, one arriving per step:\n"
          "    prefix caching on  {:>8.2f} ms p50 ({} prompt tokens computed)\n"
          "    prefix caching off {:>8.2f} ms p50 ({} prompt tokens computed): {:.1f}x slower\n",
          o.ttft_requests, system, median(on), computed_on, median(off), computed_off, median(off) / median(on));
  }
  if (o.json) fmt::print("{}\n", report.dump(2));
  return 0;
}

const CommandRegistration kBenchEngineCommand{Command{
    "bench engine", "serving engine: output tokens/s vs batch size, scheduler share, TTFT with/without prefix caching",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<BenchEngineOptions>();
      sub.add_option("--model", o->model,
                     "llama2.c checkpoint or GGUF file (default: ../shared/models/stories260K.bin if present)");
      sub.add_option("--batch-sizes", o->batch_sizes, "concurrent requests")->delimiter(',')->capture_default_str();
      sub.add_option("--prompt-tokens", o->prompt_tokens, "prompt length of each request")->capture_default_str();
      sub.add_option("--max-tokens", o->max_tokens, "output tokens of each request")->capture_default_str();
      sub.add_option("--system-prompt-tokens", o->system_prompt_tokens, "shared prefix of the TTFT workload")
          ->capture_default_str();
      sub.add_option("--ttft-requests", o->ttft_requests, "requests of the TTFT workload")->capture_default_str();
      sub.add_option("--repeats", o->repeats, "runs per case (the median is reported)")->capture_default_str();
      sub.add_option("--block-size", o->block_size, "tokens per KV block")->capture_default_str();
      sub.add_option("--threads", o->threads, "kernel threads (default: PAGEDKV_NUM_THREADS or the CPU count)");
      sub.add_flag("--skip-builtin", o->skip_builtin, "only the checkpoint");
      sub.add_flag("--with-hybrid", o->with_hybrid,
                   "also the built-in model with Gemma 2's layer pattern (even layers: a 32-token sliding window)");
      sub.add_flag("--json", o->json, "print the results as JSON");
      return [o] { return run_bench_engine(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
