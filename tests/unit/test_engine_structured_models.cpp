// Structured output through every random-weight model of ../shared/models/gguf (each tiny-* and
// small-* file: llama, qwen2, gemma2, qwen3, phi3 and qwen3moe in every weight type there) and
// stories260K: seeded random JSON Schemas (schema_generator.h) and a few regexes, each generated
// at temperature 1 and greedy through LLMEngine. Every output that ended on a stop token must
// validate (Debian's python3-jsonschema, Draft 2020-12; re.fullmatch), all models in one batch;
// one cut by max_tokens (or aborted at a dead end of stories260K's vocabulary, below) must be a
// prefix the grammar still accepts, token by token.
// PAGEDKV_GRAMMAR_SCHEMAS sets the schemas per model: by default 10 (the whole test in about 7 s
// on two cores); 1000 is the full run (docs/structured_output.md records one).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_support.h"
#include "grammar_test_support.h"
#include "schema_generator.h"
#include "pagedkv/engine/grammar_vocabulary.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/model_file.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv {
namespace {

namespace fs = std::filesystem;
namespace g = pagedkv::grammar;
using nlohmann::json;

const char* const kRegexes[] = {R"(\d{3}-\d{4})", R"((yes|no|maybe)!{0,3})", R"([a-z]+(, [a-z]+)*\.)",
                                R"(([01]\d|2[0-3]):[0-5]\d)", R"(é[αβγ]{2}\s?)"};

struct Tally {
  int stopped = 0, capped = 0, dead_ends = 0;
};

// stories260K's tok512.bin prints no lone byte above 0x7F (run.c's safe_printf): a character
// that no piece of it spells cannot be generated there, and a grammar that needs one comes to a
// dead end (the engine reports the output aborted). The GGUF tokenizers have every byte.
bool spells_every_byte(const std::string& model) { return model != "stories260K"; }

struct Asked {
  std::string kind;  // "schema" or "regex", as the validation script reads it
  std::string text;
  std::shared_ptr<const g::CompiledGrammar> grammar;
};

// Generates `schema_count` schemas (seeded by `seed`) and the regexes at temperature 1 and 0 on
// one model; finished outputs go to `batch`, outputs cut by length are replayed here.
void generate(const LoadedModel& loaded, std::vector<TokenId> stops, const std::string& name, int schema_count,
              uint64_t seed, json& batch, Tally& tally) {
  SCOPED_TRACE(name);
  const Model& model = *loaded.model;
  const TextTokenizer& tokenizer = *loaded.tokenizer;
  auto vocabulary = make_grammar_vocabulary(tokenizer, stops, model.config().vocab_size);
  std::vector<Asked> formats;
  testing::SchemaGenerator gen(seed);
  for (int s = 0; s < schema_count; ++s) {
    const std::string schema = gen.schema().dump();
    try {
      formats.push_back({"schema", schema, g::compile_grammar(g::GrammarKind::kJsonSchema, schema, vocabulary)});
    } catch (const g::GrammarError& e) {
      ADD_FAILURE() << "a generated schema did not compile: " << e.what() << "\n" << schema;
    }
  }
  for (const char* re : kRegexes)
    formats.push_back({"regex", re, g::compile_grammar(g::GrammarKind::kRegex, re, vocabulary)});

  EngineConfig cfg;
  LLMEngine engine(model, cfg);
  const std::vector<TokenId> prompt = tokenizer.encode("Once upon a time", true);
  const int max_tokens = std::min(200, model.config().seq_len - static_cast<int>(prompt.size()) - 1);
  // Rounds of 64 formats: the compiled grammars of a round are all that is held at once.
  for (size_t first = 0; first < formats.size(); first += 64) {
    std::map<uint64_t, size_t> asked;
    for (size_t f = first; f < std::min(formats.size(), first + 64); ++f)
      for (const bool greedy : {false, true}) {
        GenerationRequest r;
        r.prompt = prompt;
        r.sampling.temperature = greedy ? 0.0f : 1.0f;
        r.sampling.seed = seed * 1000003 + f;
        r.stop.max_tokens = max_tokens;
        r.stop.eos_token_id = stops.front();
        r.stop.stop_token_ids = stops;
        r.grammar = formats[f].grammar;
        asked[engine.add_request(std::move(r)).value] = f;
      }
    for (const RequestOutput& o : engine.run_to_completion()) {
      const Asked& a = formats[asked.at(o.id.value)];
      std::string text;
      for (TokenId id : o.output) text += vocabulary->bytes(id);
      if (o.finish_reason == FinishReason::kLength || o.finish_reason == FinishReason::kAborted) {
        if (o.finish_reason == FinishReason::kAborted) {
          EXPECT_FALSE(spells_every_byte(name)) << "a grammar dead end after '" << text << "'\n" << a.text;
          ++tally.dead_ends;
        } else {
          ++tally.capped;
        }
        g::GrammarMatcher m(a.grammar);
        for (TokenId id : o.output)
          ASSERT_TRUE(m.accept_token(id)) << "token " << id << " after '" << text << "'\n" << a.text;
        continue;
      }
      ASSERT_EQ(o.finish_reason, FinishReason::kStop) << finish_reason_name(o.finish_reason);
      ++tally.stopped;
      batch.push_back({{"kind", a.kind}, {"schema", a.text}, {"output", text}, {"model", name}});
    }
  }
}

TEST(EngineStructuredModels, RandomSchemasOnEveryModelValidate) {
  PAGEDKV_REQUIRE_MODELS(dir);
  if (!testing::python_has_jsonschema()) GTEST_SKIP() << "/usr/bin/python3 has no jsonschema";
  const int schema_count = testing::env_int("PAGEDKV_GRAMMAR_SCHEMAS", 10);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir / "gguf")) {
    const std::string f = e.path().filename().string();
    if ((f.starts_with("tiny-") || f.starts_with("small-")) && f.ends_with(".gguf")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    GTEST_SKIP() << dir / "gguf"
                 << " holds no tiny-* or small-* model";
  json batch = json::array();
  Tally all;
  int models = 0;
  const auto start = std::chrono::steady_clock::now();
  auto run = [&](const LoadedModel& loaded, std::vector<TokenId> stops, const std::string& name) {
    Tally t;
    generate(loaded, std::move(stops), name, schema_count, 42 + static_cast<uint64_t>(models), batch, t);
    std::fprintf(stderr, "%s: %d stopped, %d cut by max_tokens, %d dead ends\n", name.c_str(), t.stopped, t.capped,
                 t.dead_ends);
    all.stopped += t.stopped;
    all.capped += t.capped;
    all.dead_ends += t.dead_ends;
    ++models;
  };
  run(load_model_file((dir / "stories260K.bin").string(), (dir / "tok512.bin").string()), {Tokenizer::kBos},
      "stories260K");
  if (HasFatalFailure()) return;
  for (const fs::path& path : files) {
    LoadedModel loaded = load_model_file(path.string());
    ASSERT_TRUE(loaded.tokenizer) << path << ": " << loaded.tokenizer_error;
    // What ends a generation, as pagedkv serve sets it: the EOS and the end-of-turn tokens.
    std::vector<TokenId> stops = loaded.tokenizer->end_of_generation_ids();
    stops.insert(stops.begin(), loaded.tokenizer->eos_id());
    run(loaded, std::move(stops), path.filename().string());
    if (HasFatalFailure()) return;
  }
  const json result = testing::run_python(testing::kSchemaValidateScript, batch);
  ASSERT_TRUE(result.is_object()) << "the Python check did not run";
  EXPECT_EQ(result["checked"].get<size_t>(), batch.size());
  for (const auto& e : result["errors"]) {
    const auto& c = batch[e["case"].get<size_t>()];
    ADD_FAILURE() << c["model"].get<std::string>() << ": " << e["error"].get<std::string>() << "\n  "
                  << c["kind"].get<std::string>() << ": " << c["schema"].get<std::string>()
                  << "\n  output: " << c["output"].get<std::string>();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "%d models, %d schemas and %zu regexes each, temperature 1 and greedy: %d outputs stopped "
               "and validated (%zu errors), %d cut by max_tokens and %d ended at a dead end (stories260K) still "
               "accepted; %.1f s\n",
               models, schema_count, std::size(kRegexes), all.stopped, result["errors"].size(), all.capped,
               all.dead_ends, seconds);
  // A check that validates nothing proves nothing: most schemas close within max_tokens.
  EXPECT_GT(all.stopped, (all.stopped + all.capped) / 4);
}

}  // namespace
}  // namespace pagedkv
