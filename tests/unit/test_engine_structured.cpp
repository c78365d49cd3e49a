// Structured output through the engine: requests carrying a compiled grammar (JSON Schema,
// json_object, regex, choice) on stories260K and a random-weight GGUF, at temperature 1 and
// greedy, n = 2, with prefix caching and a pool small enough to preempt (swap and recompute). Every output that
// finished on a stop token parses and validates (Debian's python3 with jsonschema, re.fullmatch,
// in one batch); one cut by max_tokens is a prefix the grammar still accepts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_support.h"
#include "grammar_test_support.h"
#include "pagedkv/core/error.h"
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

struct Format {
  g::GrammarKind kind;
  std::string text;
};

const std::vector<Format>& formats() {
  static const std::vector<Format> kFormats = {
      {g::GrammarKind::kJsonSchema,
       json{{"type", "object"},
            {"properties",
             {{"name", {{"type", "string"}, {"maxLength", 6}}},
              {"age", {{"type", "integer"}, {"minimum", 0}, {"maximum", 120}}},
              {"ok", {{"type", "boolean"}}},
              {"tags", {{"type", "array"}, {"items", {{"enum", {"a", "b", "c"}}}}, {"maxItems", 3}}}}},
            {"required", {"name", "age"}}}
           .dump()},
      {g::GrammarKind::kJsonSchema, json{{"enum", {"north", "south", 7, nullptr}}}.dump()},
      {g::GrammarKind::kJsonObject, ""},
      {g::GrammarKind::kRegex, "[a-z]{1,5}(-[0-9]{1,3}){0,2}"},
      {g::GrammarKind::kChoice, json{"red", "green", "blue"}.dump()},
  };
  return kFormats;
}

struct ServedFile {
  LoadedModel loaded;
  std::vector<TokenId> stops;  // what ends a generation (as pagedkv serve sets it)
};

// Generates every format at temperature 1 and 0 with n = 2 on `model`; checks the outputs.
void generate_and_check(const ServedFile& f, const std::string& name, PreemptionMode preemption) {
  SCOPED_TRACE(name + (preemption == PreemptionMode::kSwap ? " (swap)" : " (recompute)"));
  const Model& model = *f.loaded.model;
  const TextTokenizer& tokenizer = *f.loaded.tokenizer;
  auto vocabulary = make_grammar_vocabulary(tokenizer, f.stops, model.config().vocab_size);
  g::GrammarCache cache(vocabulary, 16);

  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 40;  // 156 tokens for 20 sequences: preemption
  cfg.enable_prefix_caching = true;
  cfg.check_invariants = true;
  cfg.scheduler.preemption_mode = preemption;
  LLMEngine engine(model, cfg);
  const std::vector<TokenId> prompt = tokenizer.encode("Once upon a time, there was a little", true);
  struct Asked {
    size_t format;
    bool greedy;
  };
  std::map<uint64_t, Asked> asked;
  uint64_t seed = 1;
  for (size_t fi = 0; fi < formats().size(); ++fi)
    for (const bool greedy : {false, true}) {
      GenerationRequest r;
      r.prompt = prompt;
      r.sampling.temperature = greedy ? 0.0f : 1.0f;
      r.sampling.seed = seed++;
      r.n = 2;
      r.stop.max_tokens = 100;
      r.stop.eos_token_id = f.stops.front();
      r.stop.stop_token_ids = f.stops;
      r.grammar = cache.get(formats()[fi].kind, formats()[fi].text);
      asked[engine.add_request(std::move(r)).value] = {fi, greedy};
    }
  std::vector<RequestOutput> done = engine.run_to_completion();
  ASSERT_EQ(done.size(), 2 * asked.size());
  EXPECT_GT(preemption == PreemptionMode::kSwap ? engine.scheduler().stats().preemptions_swap
                                                : engine.scheduler().stats().preemptions_recompute,
            0u)
      << "the pool was meant to be small enough to preempt";

  json batch = json::array();
  int stopped = 0;
  std::map<uint64_t, std::vector<std::vector<TokenId>>> greedy_outputs;
  for (const RequestOutput& o : done) {
    const uint64_t root = o.sample_index == 0 ? o.id.value : o.parent.value;
    const Asked& a = asked.at(root);
    const Format& format = formats()[a.format];
    std::string text;
    for (TokenId id : o.output) text += vocabulary->bytes(id);
    // The text the server would send is the same bytes.
    std::vector<TokenId> with_context = o.prompt;
    with_context.insert(with_context.end(), o.output.begin(), o.output.end());
    EXPECT_EQ(tokenizer.render(with_context).substr(tokenizer.render(o.prompt).size()), text);
    if (a.greedy) greedy_outputs[root].push_back(o.output);
    ASSERT_TRUE(o.finish_reason == FinishReason::kStop || o.finish_reason == FinishReason::kLength)
        << finish_reason_name(o.finish_reason);
    if (o.finish_reason == FinishReason::kLength) {
      // Cut by max_tokens: still a prefix of the grammar.
      g::GrammarMatcher m(cache.get(format.kind, format.text));
      for (TokenId id : o.output) ASSERT_TRUE(m.accept_token(id)) << "token " << id << " after '" << text << "'";
      continue;
    }
    ++stopped;
    batch.push_back({{"kind", g::grammar_kind_name(format.kind)}, {"format", format.text}, {"text", text}});
  }
  // Greedy samples under the same grammar agree.
  for (const auto& [root, outs] : greedy_outputs) {
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(outs[0], outs[1]);
  }
  EXPECT_GT(stopped, static_cast<int>(done.size()) / 3) << "most outputs should complete within 100 tokens";
  if (std::getenv("PAGEDKV_PRINT_OUTPUTS") != nullptr) std::fprintf(stderr, "%s\n", batch.dump().c_str());
  if (!testing::python_has_jsonschema()) GTEST_SKIP() << "python3-jsonschema is absent";
  const json verdicts = testing::run_python(R"(
import json, re, sys, jsonschema
out = []
for c in json.load(open(sys.argv[1])):
    try:
        if c["kind"] == "regex":
            ok = re.fullmatch(c["format"], c["text"]) is not None
        elif c["kind"] == "choice":
            ok = c["text"] in json.loads(c["format"])
        else:
            value = json.loads(c["text"])
            if c["kind"] == "json_object":
                ok = isinstance(value, dict)
            else:
                jsonschema.validate(value, json.loads(c["format"]))
                ok = True
    except Exception as e:
        ok = False
    out.append(ok)
print(json.dumps(out))
)",
                                            batch);
  ASSERT_TRUE(verdicts.is_array()) << "python failed";
  ASSERT_EQ(verdicts.size(), batch.size());
  for (size_t i = 0; i < batch.size(); ++i) EXPECT_TRUE(verdicts[i].get<bool>()) << batch[i].dump();
}

TEST(EngineStructured, Stories260KOutputsValidate) {
  PAGEDKV_REQUIRE_MODELS(dir);
  ServedFile f{load_model_file((dir / "stories260K.bin").string(), (dir / "tok512.bin").string()), {Tokenizer::kBos}};
  for (const PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute})
    generate_and_check(f, "stories260K", mode);
}

TEST(EngineStructured, RandomGgufOutputsValidate) {
  PAGEDKV_REQUIRE_MODELS(dir);
  for (const char* name : {"tiny-llama.q8_0.gguf", "tiny-qwen2.f16.gguf"}) {
    const fs::path path = dir / "gguf" / name;
    if (!fs::exists(path)) GTEST_SKIP() << path << " is absent";
    ServedFile f{load_model_file(path.string()), {}};
    ASSERT_TRUE(f.loaded.tokenizer) << f.loaded.tokenizer_error;
    f.stops = f.loaded.tokenizer->end_of_generation_ids();
    f.stops.insert(f.stops.begin(), f.loaded.tokenizer->eos_id());
    generate_and_check(f, name, name[5] == 'l' ? PreemptionMode::kSwap : PreemptionMode::kRecompute);
  }
}

TEST(EngineStructured, VocabularyHoldsEachTokensRawBytes) {
  PAGEDKV_REQUIRE_MODELS(dir);
  LoadedModel loaded = load_model_file((dir / "gguf" / "tiny-llama.q8_0.gguf").string());
  ASSERT_TRUE(loaded.tokenizer);
  const TextTokenizer& tok = *loaded.tokenizer;
  const std::vector<TokenId> stops{tok.eos_id()};
  const std::vector<std::string> bytes = grammar_token_bytes(tok, stops, loaded.model->config().vocab_size + 3);
  ASSERT_EQ(bytes.size(), static_cast<size_t>(loaded.model->config().vocab_size + 3));
  EXPECT_TRUE(bytes[static_cast<size_t>(tok.bos_id())].empty());
  EXPECT_TRUE(bytes[static_cast<size_t>(tok.eos_id())].empty());
  EXPECT_TRUE(bytes.back().empty());  // past the tokenizer: never allowed
  // SentencePiece: "▁Once" is " Once" in the middle of a text; a <0xNN> piece is that byte.
  const std::vector<TokenId> ids = tok.encode("Hi Once", false);
  std::string joined;
  for (TokenId id : ids) joined += bytes[static_cast<size_t>(id)];
  EXPECT_EQ(joined, " Hi Once");
  const std::vector<TokenId> byte_ids = tok.encode("\x01", false);
  ASSERT_FALSE(byte_ids.empty());
  EXPECT_EQ(bytes[static_cast<size_t>(byte_ids.back())], std::string("\x01"));
  // A stop id outside the vocabulary is a configuration error.
  EXPECT_THROW(make_grammar_vocabulary(tok, {loaded.model->config().vocab_size + 5}, loaded.model->config().vocab_size),
               ConfigError);
}

TEST(EngineStructured, GrammarDeadEndIsAbortedNotStopped) {
  // tok512.bin prints no lone byte above 0x7F (run.c's safe_printf), so its vocabulary spells é
  // (a piece of its own) but no Greek letter: after "é" nothing continues the regex.
  PAGEDKV_REQUIRE_MODELS(dir);
  LoadedModel loaded = load_model_file((dir / "stories260K.bin").string(), (dir / "tok512.bin").string());
  auto vocabulary = make_grammar_vocabulary(*loaded.tokenizer, {Tokenizer::kBos}, loaded.model->config().vocab_size);
  auto dead_end = g::compile_grammar(g::GrammarKind::kRegex, "é[αβγ]{2}", vocabulary);
  EngineConfig cfg;
  cfg.check_invariants = true;
  LLMEngine engine(*loaded.model, cfg);
  for (const int n : {1, 3}) {
    GenerationRequest r;
    r.prompt = loaded.tokenizer->encode("Once upon a time", true);
    r.stop.max_tokens = 20;
    r.stop.eos_token_id = Tokenizer::kBos;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 7;
    r.n = n;
    r.grammar = dead_end;
    engine.add_request(std::move(r));
  }
  const std::vector<RequestOutput> done = engine.run_to_completion();
  ASSERT_EQ(done.size(), 4u);
  for (const RequestOutput& o : done) {
    EXPECT_EQ(o.finish_reason, FinishReason::kAborted) << finish_reason_name(o.finish_reason);
    std::string text;
    for (TokenId id : o.output) text += vocabulary->bytes(id);
    EXPECT_EQ(text, "é");
  }
}

TEST(EngineStructured, GrammarEndsTheRequestAndRefusesBeamSearch) {
  PAGEDKV_REQUIRE_MODELS(dir);
  LoadedModel loaded = load_model_file((dir / "stories260K.bin").string(), (dir / "tok512.bin").string());
  auto vocabulary = make_grammar_vocabulary(*loaded.tokenizer, {Tokenizer::kBos}, loaded.model->config().vocab_size);
  auto choice = g::compile_grammar(g::GrammarKind::kChoice, R"(["cat","dog"])", vocabulary);
  EngineConfig cfg;
  cfg.check_invariants = true;
  LLMEngine engine(*loaded.model, cfg);
  GenerationRequest r;
  r.prompt = loaded.tokenizer->encode("The", true);
  r.stop.max_tokens = 100;
  r.stop.ignore_eos = true;  // the grammar's end still ends it
  r.stop.eos_token_id = Tokenizer::kBos;
  r.stop.min_tokens = 50;  // and wins over min_tokens once the output is complete
  r.grammar = choice;
  GenerationRequest beam = r;
  beam.beam_width = 2;
  EXPECT_THROW(engine.add_request(std::move(beam)), UsageError);
  engine.add_request(std::move(r));
  const std::vector<RequestOutput> done = engine.run_to_completion();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish_reason, FinishReason::kStop);
  std::string text;
  for (TokenId id : done[0].output) text += vocabulary->bytes(id);
  EXPECT_TRUE(text == "cat" || text == "dog") << text;
  // A grammar for a larger vocabulary than the model's is refused.
  std::vector<std::string> big(static_cast<size_t>(loaded.model->config().vocab_size) + 1, "a");
  auto other = g::compile_grammar(g::GrammarKind::kRegex, "a+", g::TokenVocabulary::create(big, {0}));
  GenerationRequest wrong;
  wrong.prompt = {1};
  wrong.grammar = other;
  EXPECT_THROW(engine.add_request(std::move(wrong)), UsageError);
}

}  // namespace
}  // namespace pagedkv
