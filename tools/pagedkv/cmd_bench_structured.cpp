// pagedkv bench structured: what structured output costs while decoding. For each schema of a
// built-in set (a tool call, a person record, a record with length and number bounds, a list of
// integers, a lower-case regex), B requests (B in --batch-sizes) with 4-token prompts decode up to
// --max-tokens tokens through one engine,
// constrained by the schema's grammar, and the same requests unconstrained, the two alternated
// --repeats times. Reported per schema and batch size: output tokens per second of each (median),
// their ratio (the target is >= 0.95), the time the grammar adds per output token, and the
// grammar's compile time (cold) over the model's vocabulary. With random weights a constrained
// output may end early (its JSON closes); rates are per token actually generated.
// --mask-overlap both also runs every constrained case with the grammar masks filled inline after
// the forward pass (EngineConfig::grammar_mask_overlap off), alternated with the others: one row
// per setting, against the same unconstrained runs.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "engine_options.h"
#include "run_statistics.h"
#include "pagedkv/core/error.h"
#include "pagedkv/demo/demo_workload.h"
#include "pagedkv/engine/grammar_vocabulary.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/grammar/compiled_grammar.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/model_file.h"

namespace pagedkv::cli {
namespace {

using demo::DemoRng;

using Clock = std::chrono::steady_clock;

struct BenchStructuredOptions {
  std::string model;  // default: ../shared/models/gguf/small-llama.q8_0.gguf
  std::string tokenizer;  // default: the model file's own
  std::vector<int> batch_sizes{1, 16};
  int max_tokens = 64;
  int repeats = 3;
  int threads = 0;
  std::string mask_overlap = "on";  // on, off or both
  std::string only;  // run only the schemas whose name contains this
  bool json = false;
};

struct Schema {
  const char* name;
  grammar::GrammarKind kind;
  const char* text;
};

const std::vector<Schema>& schemas() {
  static const std::vector<Schema> s = {
      {"tool call", grammar::GrammarKind::kJsonSchema,
       R"({"type":"object","properties":{"name":{"enum":["get_weather","search_web"]},"arguments":{"type":"object",)"
       R"("properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city"]}},)"
       R"("required":["name","arguments"]})"},
      {"person", grammar::GrammarKind::kJsonSchema,
       R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string",)"
       R"("format":"email"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"]})"},
      // A zod-style record: strings with length bounds, a number range.
      {"bounded record", grammar::GrammarKind::kJsonSchema,
       R"({"type":"object","properties":{"title":{"type":"string","minLength":1,"maxLength":64},)"
       R"("summary":{"type":"string","maxLength":200},"score":{"type":"number","minimum":0,"maximum":1},)"
       R"("tags":{"type":"array","items":{"type":"string","maxLength":32},"maxItems":5}},)"
       R"("required":["title","summary","score","tags"],"additionalProperties":false})"},
      {"list of integers", grammar::GrammarKind::kJsonSchema, R"({"type":"array","items":{"type":"integer"}})"},
      {"regex [a-z ]+", grammar::GrammarKind::kRegex, "[a-z ]+"},
  };
  return s;
}

struct Run {
  double tokens_per_s = 0;
  uint64_t tokens = 0;
};

// B requests through one engine; the grammar (if any) constrains each.
Run run_batch(const Model& model, TokenId eos, int batch, int max_tokens,
              const std::shared_ptr<const grammar::CompiledGrammar>& g, uint64_t seed, bool mask_overlap) {
  const int prompt = 4;
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = batch * ((prompt + max_tokens) / c.block_size + 2) + 2;
  c.swap_space_bytes = 0;
  c.grammar_mask_overlap = mask_overlap;
  c.scheduler.max_num_seqs = batch;
  c.scheduler.max_num_batched_tokens = std::max(2048, batch * (prompt + max_tokens));
  LLMEngine engine(model, c);
  DemoRng rng(seed);
  for (int i = 0; i < batch; ++i) {
    GenerationRequest r;
    r.prompt.push_back(1);
    for (int t = 1; t < prompt; ++t) r.prompt.push_back(rng.uniform_int(3, model.config().vocab_size - 1));
    r.sampling.temperature = 1.0f;
    r.sampling.seed = rng.next() | 1;
    r.stop.max_tokens = max_tokens;
    r.stop.eos_token_id = eos;
    r.grammar = g;
    engine.add_request(std::move(r));
  }
  const auto t0 = Clock::now();
  engine.run_to_completion();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t tokens = engine.stats().output_tokens;
  return {static_cast<double>(tokens) / seconds, tokens};
}

int run_bench_structured(BenchStructuredOptions o) {
  if (o.threads > 0) set_kernel_threads(o.threads);
  if (o.repeats < 1 || o.max_tokens < 1) throw ConfigError("--repeats and --max-tokens must be at least 1");
  for (int b : o.batch_sizes)
    if (b < 1) throw ConfigError(fmt::format("--batch-sizes must be positive, got {}", b));
  std::vector<bool> overlaps;
  if (o.mask_overlap == "on" || o.mask_overlap == "both") overlaps.push_back(true);
  if (o.mask_overlap == "off" || o.mask_overlap == "both") overlaps.push_back(false);
  if (overlaps.empty()) throw ConfigError(fmt::format("--mask-overlap is on, off or both, not '{}'", o.mask_overlap));
  if (o.model.empty()) o.model = default_shared_dir() + "/models/gguf/small-llama.q8_0.gguf";
  const LoadedModel loaded = load_model_file(o.model, o.tokenizer, {});
  if (!loaded.tokenizer)
    throw ConfigError(
        fmt::format("{} has no tokenizer pagedkv can use ({}); pass --tokenizer", o.model, loaded.tokenizer_error));
  const Model& model = *loaded.model;
  const TokenId eos = loaded.tokenizer->eos_id();
  const auto vocabulary = make_grammar_vocabulary(*loaded.tokenizer, {eos}, model.config().vocab_size);

  nlohmann::json report = {{"model", o.model},
                           {"vocabulary", model.config().vocab_size},
                           {"kernel_threads", kernel_threads()},
                           {"repeats", o.repeats},
                           {"max_tokens", o.max_tokens}};
  if (!o.json) {
    fmt::print(
        "pagedkv bench structured: {} ({} tokens in the vocabulary), {} kernel threads, medians of {} alternated runs, "
        "up to {} output tokens a request\n",
        o.model, model.config().vocab_size, kernel_threads(), o.repeats, o.max_tokens);
    fmt::print("  {:<18} {:>10} {:>5} {:>7}  {:>13} {:>13} {:>8} {:>13} {:>10}\n", "schema", "compile ms", "batch",
               "overlap", "free tok/s", "schema tok/s", "ratio", "added us/tok", "tokens");
  }
  for (const Schema& s : schemas()) {
    if (std::string_view(s.name).find(o.only) == std::string_view::npos) continue;
    const auto c0 = Clock::now();
    const auto compiled = grammar::compile_grammar(s.kind, s.text, vocabulary);
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
    for (int b : o.batch_sizes) {
      std::vector<double> free_tps;
      std::vector<std::vector<double>> schema_tps(overlaps.size());
      std::vector<uint64_t> schema_tokens(overlaps.size());
      for (int r = 0; r < o.repeats; ++r) {  // alternated: the machine's drift hits all alike
        const uint64_t seed = 1000 + static_cast<uint64_t>(r);
        free_tps.push_back(run_batch(model, eos, b, o.max_tokens, nullptr, seed, true).tokens_per_s);
        for (size_t m = 0; m < overlaps.size(); ++m) {
          const Run constrained = run_batch(model, eos, b, o.max_tokens, compiled, seed, overlaps[m]);
          schema_tps[m].push_back(constrained.tokens_per_s);
          schema_tokens[m] = constrained.tokens;
        }
      }
      const double f = median(free_tps);
      for (size_t m = 0; m < overlaps.size(); ++m) {
        const double c = median(schema_tps[m]);
        const double added_us = 1e6 * (1.0 / c - 1.0 / f);
        report["results"].push_back({{"schema", s.name},
                                     {"compile_ms", compile_ms},
                                     {"batch", b},
                                     {"mask_overlap", static_cast<bool>(overlaps[m])},
                                     {"unconstrained_tokens_per_s", f},
                                     {"constrained_tokens_per_s", c},
                                     {"ratio", c / f},
                                     {"added_us_per_token", added_us},
                                     {"constrained_tokens", schema_tokens[m]},
                                     {"runs_unconstrained", free_tps},
                                     {"runs_constrained", schema_tps[m]}});
        if (!o.json)
          fmt::print("  {:<18} {:>10.1f} {:>5} {:>7}  {:>13.0f} {:>13.0f} {:>7.2f}x {:>13.1f} {:>10}\n", s.name,
                     compile_ms, b, overlaps[m] ? "on" : "off", f, c, c / f, added_us, schema_tokens[m]);
      }
      std::fflush(stdout);
    }
  }
  if (o.json) fmt::print("{}\n", report.dump(2));
  return 0;
}

const CommandRegistration kBenchStructuredCommand{Command{
    "bench structured", "structured output: decode tokens/s with a schema's grammar against without, and compile time",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<BenchStructuredOptions>();
      sub.add_option("--model", o->model,
                     "GGUF or llama2.c model (default: ../shared/models/gguf/small-llama.q8_0.gguf)");
      sub.add_option("--tokenizer", o->tokenizer, "its tokenizer, if not the model file's own");
      sub.add_option("--batch-sizes", o->batch_sizes, "concurrent requests")->delimiter(',')->capture_default_str();
      sub.add_option("--max-tokens", o->max_tokens, "output tokens a request may generate")->capture_default_str();
      sub.add_option("--repeats", o->repeats, "alternated runs per case (the median is reported)")
          ->capture_default_str();
      sub.add_option("--threads", o->threads, "kernel threads (default: PAGEDKV_NUM_THREADS or the CPU count)");
      sub.add_option("--mask-overlap", o->mask_overlap,
                     "grammar masks filled during the forward pass (on), after it (off), or both alternated")
          ->capture_default_str();
      sub.add_option("--only", o->only, "run only the schemas whose name contains this text");
      sub.add_flag("--json", o->json, "print the results as JSON");
      return [o] { return run_bench_structured(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
