// pagedkv generate: llama2.c's `run` on the paged engine. One prompt prints exactly what run
// prints; --batch FILE serves one prompt per line concurrently through one engine. --model takes
// a llama2.c checkpoint or a GGUF file (its tokenizer then comes from the file unless
// --tokenizer is given).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <fstream>
#include <iostream>
#include <map>

#include "command.h"
#include "engine_options.h"
#include "pagedkv/core/error.h"
#include "pagedkv/engine/llama2c_run_request.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/model_file.h"

namespace pagedkv::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer, prompt, batch_file;
  float temperature = 1.0f;
  float top_p = 0.9f;
  int steps = 256;
  long long seed = 0;
  int n = 1;
  int context_length = 0;
  bool json = false;
  bool quiet = false;
  bool gguf = false;  // set from the model file
  EngineOptions engine;
};

GenerationRequest make_request(const TextTokenizer& tok, const std::string& text, const GenerateOptions& o, int steps,
                               uint64_t seed) {
  SamplingParams sampling;
  sampling.temperature = o.temperature;
  sampling.top_p = o.top_p;
  sampling.seed = seed;
  GenerationRequest g = llama2c_run_request(tok.encode(text, true), steps, sampling);
  // run.c stops on BOS only; a GGUF vocabulary's own EOS and end-of-turn tokens (EOT, EOM) end a
  // text too.
  if (o.gguf)
    for (TokenId id : tok.end_of_generation_ids())
      if (id != tok.bos_id()) g.stop.stop_token_ids.push_back(id);
  g.n = o.n;
  return g;
}

int run_generate(GenerateOptions o) {
  if (o.model.empty()) o.model = default_shared_dir() + "/models/stories260K.bin";
  o.gguf = GgufFile::has_gguf_magic(o.model);
  // A llama2.c checkpoint without --tokenizer: the one beside it (load_model_file).
  LoadedModel loaded = load_model_file(o.model, o.tokenizer, ModelFileOptions{o.context_length});
  if (!loaded.tokenizer) throw ConfigError(fmt::format("{}; pass --tokenizer", loaded.tokenizer_error));
  const Model& model = *loaded.model;
  const TextTokenizer& tok = *loaded.tokenizer;
  int steps = o.steps;
  if (steps <= 0 || steps > model.config().seq_len) steps = model.config().seq_len;
  const uint64_t seed = o.seed > 0 ? static_cast<uint64_t>(o.seed) : static_cast<uint64_t>(std::time(nullptr));
  o.engine.apply_threads();
  EngineConfig cfg = o.engine.to_config();
  LLMEngine engine(model, cfg);
  // Start-up summary on stderr, as vLLM logs it; stdout stays exactly what run prints.
  if (!o.quiet) fmt::print(stderr, "{}\n", engine.describe());

  std::vector<std::string> prompts;
  if (!o.batch_file.empty()) {
    std::ifstream in(o.batch_file);
    if (!in) throw ConfigError(fmt::format("cannot open --batch file '{}'", o.batch_file));
    for (std::string line; std::getline(in, line);) prompts.push_back(line);
  } else {
    prompts.push_back(o.prompt);
  }
  struct Slot {
    std::string prompt;
    std::vector<RequestOutput> outputs;
    std::vector<TokenId> prompt_ids;
  };
  std::vector<Slot> slots(prompts.size());
  std::map<uint64_t, size_t> slot_of;  // root request id -> prompt index
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest g = make_request(tok, prompts[i], o, steps, seed);
    slots[i].prompt = prompts[i];
    slots[i].prompt_ids = g.prompt;
    if (g.stop.max_tokens <= 0) continue;  // the prompt alone fills the steps: nothing to generate
    slot_of[engine.add_request(std::move(g)).value] = i;
  }
  const auto t0 = std::chrono::steady_clock::now();
  size_t generated = 0;
  for (RequestOutput& out : engine.run_to_completion()) {
    const uint64_t root = out.sample_index == 0 ? out.id.value : out.parent.value;
    generated += out.output.size();
    slots[slot_of.at(root)].outputs.push_back(std::move(out));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slots[i];
    std::sort(s.outputs.begin(), s.outputs.end(), [](auto& a, auto& b) { return a.sample_index < b.sample_index; });
    if (s.outputs.empty()) {  // steps <= prompt length: run.c prints the forced prompt tokens
      std::vector<TokenId> ids(
          s.prompt_ids.begin(),
          s.prompt_ids.begin() + std::min<size_t>(s.prompt_ids.size(), static_cast<size_t>(steps) + 1));
      if (o.json) {
        // The same fields as a served request's record.
        nlohmann::json j{{"prompt", s.prompt},
                         {"sample_index", 0},
                         {"text", tok.render(ids)},
                         {"token_ids", ids},
                         {"finish_reason", "length"},
                         {"prefix_hit_tokens", 0},
                         {"hit_tokens_by_tier", {{"device", 0}, {"host", 0}, {"disk", 0}, {"remote", 0}}},
                         {"num_preemptions", 0},
                         {"ttft_ms", nullptr},
                         {"tpot_ms", nullptr}};
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{}\n", tok.render(ids));
      }
      continue;
    }
    for (const RequestOutput& out : s.outputs) {
      std::vector<TokenId> ids = out.prompt;
      ids.insert(ids.end(), out.output.begin(), out.output.end());
      const std::string text = tok.render(ids);
      if (o.json) {
        nlohmann::json j{{"prompt", s.prompt},
                         {"sample_index", out.sample_index},
                         {"text", text},
                         {"token_ids", ids},
                         {"finish_reason", std::string(finish_reason_name(out.finish_reason))},
                         {"prefix_hit_tokens", out.prefix_hit_tokens},
                         {"hit_tokens_by_tier",
                          {{"device", out.hit_tokens_by_tier.device},
                           {"host", out.hit_tokens_by_tier.host},
                           {"disk", out.hit_tokens_by_tier.disk},
                           {"remote", out.hit_tokens_by_tier.remote}}},
                         {"num_preemptions", out.num_preemptions},
                         {"ttft_ms", out.ttft_ms},
                         {"tpot_ms", out.tpot_ms}};
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{}\n", text);
      }
    }
  }
  std::fflush(stdout);
  if (!o.quiet)
    fmt::print(stderr, "achieved tok/s: {:.1f} ({} tokens, {} requests, {} steps)\n",
               static_cast<double>(generated) / secs, generated, slot_of.size(), engine.stats().steps);
  return 0;
}

const CommandRegistration kGenerateCommand{Command{
    "generate",
    "generate text with a llama2.c checkpoint or GGUF model on the paged engine (prints what llama2.c's run prints)",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<GenerateOptions>();
      sub.add_option("--model,-m", o->model,
                     "llama2.c checkpoint or GGUF file (default: ../shared/models/stories260K.bin)");
      sub.add_option(
          "--tokenizer,-z", o->tokenizer,
          "llama2.c tokenizer or GGUF file (default: tok512.bin for a checkpoint, the model's own for GGUF)");
      sub.add_option("--context-length", o->context_length,
                     "GGUF: replace the file's context length (llama.cpp's n_ctx); 0 = the file's");
      sub.add_option("-t,--temperature", o->temperature, "0 = greedy")->capture_default_str();
      sub.add_option("-p,--top-p", o->top_p, "nucleus sampling mass")->capture_default_str();
      sub.add_option("-n,--steps", o->steps, "forward passes, prompt included (0 = seq_len)")->capture_default_str();
      sub.add_option("-i,--prompt", o->prompt, "prompt text");
      sub.add_option("-s,--seed", o->seed, "random seed (0 = time)");
      sub.add_option("--samples", o->n, "parallel samples per prompt (n), sharing the prompt's blocks")
          ->capture_default_str();
      sub.add_option("--batch", o->batch_file, "file with one prompt per line, served concurrently");
      sub.add_flag("--json", o->json, "one JSON object per line per output");
      sub.add_flag("-q,--quiet", o->quiet, "do not print the engine's start-up summary to stderr");
      o->engine.add_to(sub);
      return [o] { return run_generate(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
