// End to end: seeded random JSON Schemas (a generator over the supported keywords) and regexes,
// compiled for real vocabularies; outputs sampled under the mask (uniform over the allowed
// tokens, with some pull toward closing so that outputs finish) until a stop token or a length
// cap. Finished outputs are checked by Debian's Python — jsonschema's Draft 2020-12 validator, and
// re.fullmatch — in one batch per test; an output cut by the cap must have left the matcher alive.
// PAGEDKV_GRAMMAR_SCHEMAS sets the schema count (default 200 on tok512, a twentieth of it on the 128K vocabulary;
// PAGEDKV_GRAMMAR_ALL_VOCABULARIES=1 adds the 32K and 152K ones).
#include "grammar_test_support.h"
#include "schema_generator.h"

namespace pagedkv::testing {
namespace {

// Samples with a pull toward finishing: now and then the stop token or a closing character
// when allowed, else uniform over the allowed tokens.
SampledOutput sample_toward_end(g::GrammarMatcher& m, std::mt19937_64& rng, int max_tokens) {
  const g::TokenVocabulary& v = m.grammar().vocabulary();
  return sample_under_mask(m, rng, max_tokens, [&v](const std::vector<int32_t>& ids, std::mt19937_64& r) {
    std::vector<int32_t> preferred;
    const int mode = static_cast<int>(r() % 4);
    for (int32_t id : ids) {
      if (mode == 0 && v.is_stop(id)) preferred.push_back(id);
      if (mode == 1 && !v.is_stop(id) &&
          std::string_view("\"]},0123456789").find(v.bytes(id)[0]) != std::string_view::npos)
        preferred.push_back(id);
    }
    const std::vector<int32_t>& from = preferred.empty() ? ids : preferred;
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(r)];
  });
}

struct Run {
  int finished = 0, capped = 0;
};

void sample_and_validate(const LoadedVocabulary& vocab, int schema_count, int outputs_per_schema, int max_tokens,
                         int outputs_per_regex, uint64_t seed) {
  SchemaGenerator gen(seed);
  std::mt19937_64 rng(seed ^ 0x9E3779B97F4A7C15ull);
  nlohmann::json batch = nlohmann::json::array();
  Run run;
  for (int s = 0; s < schema_count; ++s) {
    const std::string schema = gen.schema().dump();
    std::shared_ptr<const g::CompiledGrammar> compiled;
    try {
      compiled = g::compile_grammar(g::GrammarKind::kJsonSchema, schema, vocab.vocabulary);
    } catch (const g::GrammarError& e) {
      ADD_FAILURE() << vocab.name << ": a generated schema did not compile: " << e.what() << "\n" << schema;
      continue;
    }
    for (int o = 0; o < outputs_per_schema; ++o) {
      g::GrammarMatcher m(compiled);
      const SampledOutput out = sample_toward_end(m, rng, max_tokens);
      ASSERT_TRUE(out.alive) << vocab.name << ": the mask came up empty or allowed a refused token\n"
                             << schema << "\n"
                             << out.text;
      if (!out.ended) {
        ++run.capped;
        continue;
      }
      ++run.finished;
      batch.push_back({{"kind", "schema"}, {"schema", schema}, {"output", out.text}});
    }
  }
  // Regexes from a fixed list, sampled the same way.
  for (const char* re :
       {R"(\d{3}-\d{4})", R"([a-z]+(, [a-z]+)*\.)", R"((yes|no|maybe)!{0,3})", R"(\w{2,8}@\w{2,8}\.(com|org))",
        R"(([01]\d|2[0-3]):[0-5]\d)", R"([^\n"]{1,10})", R"(é[αβγ]{2}\s?)"}) {
    auto compiled = g::compile_grammar(g::GrammarKind::kRegex, re, vocab.vocabulary);
    for (int o = 0; o < outputs_per_regex; ++o) {
      g::GrammarMatcher m(compiled);
      const SampledOutput out = sample_toward_end(m, rng, max_tokens);
      ASSERT_TRUE(out.alive) << vocab.name << " regex " << re;
      if (out.ended) batch.push_back({{"kind", "regex"}, {"schema", re}, {"output", out.text}});
    }
  }
  const nlohmann::json result = run_python(kSchemaValidateScript, batch);
  ASSERT_TRUE(result.is_object()) << "the Python check did not run";
  EXPECT_EQ(result["checked"].get<size_t>(), batch.size());
  for (const auto& e : result["errors"]) {
    const auto& c = batch[e["case"].get<size_t>()];
    ADD_FAILURE() << vocab.name << ": " << e["error"].get<std::string>()
                  << "\n  schema: " << c["schema"].get<std::string>()
                  << "\n  output: " << c["output"].get<std::string>();
  }
  // Most outputs must finish, or the check proves little.
  EXPECT_GT(run.finished, (run.finished + run.capped) / 3)
      << vocab.name << " finished " << run.finished << " capped " << run.capped;
}

TEST(GrammarSampling, RandomSchemasOnTok512ValidateWithJsonschema) {
  const auto paths = shared_vocabulary_paths(false);
  if (paths.empty()) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models/stories260Ktok512.gguf is absent";
  if (!python_has_jsonschema()) GTEST_SKIP() << "/usr/bin/python3 has no jsonschema";
  sample_and_validate(load_gguf_vocabulary(paths[0]), env_int("PAGEDKV_GRAMMAR_SCHEMAS", 200), 2, 400, 4, 42);
}

TEST(GrammarSampling, RandomSchemasOnLargeVocabulariesValidateWithJsonschema) {
  const auto paths = shared_vocabulary_paths(true);
  if (paths.size() < 2) GTEST_SKIP() << "the shared big vocabularies (models/gguf/vocab) are absent";
  if (!python_has_jsonschema()) GTEST_SKIP() << "/usr/bin/python3 has no jsonschema";
  // The 128K vocabulary by default (the matcher test covers all three); every one with
  // PAGEDKV_GRAMMAR_ALL_VOCABULARIES=1.
  const bool all = env_int("PAGEDKV_GRAMMAR_ALL_VOCABULARIES", 0) != 0;
  for (size_t i = 1; i < paths.size(); ++i) {
    if (!all && paths[i].filename() != "ggml-vocab-llama-bpe.gguf") continue;
    sample_and_validate(load_gguf_vocabulary(paths[i]), env_int("PAGEDKV_GRAMMAR_SCHEMAS", 200) / 20, 1, 200, 1, 7 + i);
  }
}

}  // namespace
}  // namespace pagedkv::testing
