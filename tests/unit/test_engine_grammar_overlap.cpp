// The grammar masks filled on the mask worker while the forward pass runs
// (EngineConfig::grammar_mask_overlap) against the same masks filled inline after it: the same
// seeded constrained requests (JSON Schema, json_object, regex, choice, n > 1 forks, a grammar
// dead end, min_tokens against a grammar that can end, unconstrained neighbours, preemption)
// give the same outputs, token for token, with the same finish reasons and in the same steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_support.h"
#include "pagedkv/engine/grammar_vocabulary.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/grammar/grammar_cache.h"
#include "pagedkv/model/model_file.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv {
namespace {

namespace fs = std::filesystem;
namespace g = pagedkv::grammar;
using nlohmann::json;

struct Case {
  g::GrammarKind kind;
  std::string text;
  int n = 1;
  float temperature = 1.0f;
  int min_tokens = 0;
  bool constrained = true;
};

std::vector<Case> cases() {
  const std::string schema = json{
      {"type", "object"},
      {"properties",
       {{"name", {{"type", "string"}, {"maxLength", 6}}},
        {"age", {{"type", "integer"}, {"minimum", 0}, {"maximum", 120}}},
        {"tags", {{"type", "array"}, {"items", {{"enum", {"a", "b", "c"}}}}, {"maxItems", 3}}}}},
      {"required",
       {"name", "age"}}}.dump();
  return {
      {g::GrammarKind::kJsonSchema, schema, 1},
      {g::GrammarKind::kJsonSchema, schema, 3},  // forks copy the parent's matcher
      {g::GrammarKind::kJsonSchema, schema, 2, 0.0f},  // greedy
      {g::GrammarKind::kJsonObject, "", 2},
      {g::GrammarKind::kRegex, "[a-z]{1,5}(-[0-9]{1,3}){0,2}", 2},
      {g::GrammarKind::kRegex, "[a-z ]{1,40}", 1, 1.0f, 12},  // min_tokens bans the stop tokens
      {g::GrammarKind::kChoice, json{"cat", "dog"}.dump(), 2, 1.0f, 30},  // the grammar wins over it
      {g::GrammarKind::kRegex, "é[αβγ]{2}", 2},  // a dead end for tok512
      {g::GrammarKind::kRegex, "", 2, 1.0f, 0, false},  // unconstrained neighbours
  };
}

using Outcome = std::vector<std::tuple<size_t, uint64_t, int, std::vector<TokenId>, FinishReason, size_t>>;

// Runs every case (`stop`: the end-of-generation token) (twice, with different seeds) on one engine; the outputs as
// they were reported: (step, root request, sample index, output, finish reason, logprobs entries).
Outcome run(const LoadedModel& loaded, TokenId stop, bool overlap) {
  const Model& model = *loaded.model;
  const TextTokenizer& tokenizer = *loaded.tokenizer;
  auto vocabulary = make_grammar_vocabulary(tokenizer, {stop}, model.config().vocab_size);
  g::GrammarCache cache(vocabulary, 16);
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 48;  // preempts
  cfg.check_invariants = true;
  cfg.grammar_mask_overlap = overlap;
  LLMEngine engine(model, cfg);
  const std::vector<TokenId> prompt = tokenizer.encode("Once upon a time, there was a little", true);
  uint64_t seed = 11;
  for (int round = 0; round < 2; ++round)
    for (const Case& c : cases()) {
      GenerationRequest r;
      r.prompt = prompt;
      r.sampling.temperature = c.temperature;
      r.sampling.seed = seed++;
      r.n = c.n;
      r.logprobs = round == 0 ? -1 : 2;
      r.stop.max_tokens = 60;
      r.stop.min_tokens = c.min_tokens;
      r.stop.eos_token_id = stop;
      if (c.constrained) r.grammar = cache.get(c.kind, c.text);
      engine.add_request(std::move(r));
    }
  Outcome out;
  size_t step = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& o : engine.step())
      if (o.finished) {
        const uint64_t root = o.sample_index == 0 ? o.id.value : o.parent.value;
        out.emplace_back(step, root, o.sample_index, o.output, o.finish_reason, o.new_logprobs.size());
      }
    ++step;
  }
  return out;
}

TEST(EngineGrammarOverlap, SameOutputsWithAndWithoutOverlap) {
  PAGEDKV_REQUIRE_MODELS(dir);
  LoadedModel loaded = load_model_file((dir / "stories260K.bin").string(), (dir / "tok512.bin").string());
  const Outcome inline_masks = run(loaded, Tokenizer::kBos, false);
  const Outcome overlapped = run(loaded, Tokenizer::kBos, true);
  size_t outputs = 0;
  for (const Case& c : cases()) outputs += 2 * static_cast<size_t>(c.n);
  ASSERT_EQ(inline_masks.size(), outputs);
  int aborted = 0, stopped = 0;
  for (const auto& o : inline_masks) {
    aborted += std::get<4>(o) == FinishReason::kAborted;
    stopped += std::get<4>(o) == FinishReason::kStop;
  }
  EXPECT_EQ(aborted, 4) << "the dead-end requests (n = 2, twice) end aborted";
  EXPECT_GT(stopped, 10);
  ASSERT_EQ(overlapped.size(), inline_masks.size());
  for (size_t i = 0; i < overlapped.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(std::get<0>(overlapped[i]), std::get<0>(inline_masks[i]));
    EXPECT_EQ(std::get<1>(overlapped[i]), std::get<1>(inline_masks[i]));
    EXPECT_EQ(std::get<2>(overlapped[i]), std::get<2>(inline_masks[i]));
    EXPECT_EQ(std::get<3>(overlapped[i]), std::get<3>(inline_masks[i]));
    EXPECT_EQ(std::get<4>(overlapped[i]), std::get<4>(inline_masks[i]));
    EXPECT_EQ(std::get<5>(overlapped[i]), std::get<5>(inline_masks[i]));
  }
}

TEST(EngineGrammarOverlap, RandomGgufSameOutputs) {
  PAGEDKV_REQUIRE_MODELS(dir);
  const fs::path path = dir / "gguf" / "tiny-llama.q8_0.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent";
  LoadedModel loaded = load_model_file(path.string());
  ASSERT_TRUE(loaded.tokenizer) << loaded.tokenizer_error;
  // Its own vocabulary: a different model size, a different mask width.
  const TokenId stop = loaded.tokenizer->eos_id();
  EXPECT_EQ(run(loaded, stop, true), run(loaded, stop, false));
}

}  // namespace
}  // namespace pagedkv
