// End to end: seeded random JSON Schemas (a generator over the supported keywords) and regexes,
// compiled for real vocabularies; outputs sampled under the mask (uniform over the allowed
// tokens, with some pull toward closing so that outputs finish) until a stop token or a length
// cap. Finished outputs are checked by Debian's Python — jsonschema's Draft 2020-12 validator, and
// re.fullmatch — in one batch per test; an output cut by the cap must have left the matcher alive.
// PAGEDKV_GRAMMAR_SCHEMAS sets the schema count (default 200 on tok512, a twentieth of it on the 128K vocabulary;
// PAGEDKV_GRAMMAR_ALL_VOCABULARIES=1 adds the 32K and 152K ones).
#include "grammar_test_support.h"

namespace pagedkv::testing {
namespace {

using Json = nlohmann::ordered_json;

class SchemaGenerator {
 public:
  explicit SchemaGenerator(uint64_t seed) : rng_(seed) {}

  Json schema() {
    defs_ = Json::object();
    Json s = node(0);
    if (!defs_.empty()) s["$defs"] = defs_;
    return s;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool coin(int percent) { return pick(100) < percent; }

  std::string name() {
    static const char* names[] = {"id", "name", "a b", "é", "q\"x", "value", "items", "x", "tags", "n1", "k/v", "data"};
    return names[pick(12)];
  }

  Json leaf() {
    switch (pick(10)) {
      case 0: {
        Json s = {{"type", "string"}};
        if (coin(50)) s["minLength"] = pick(3);
        if (coin(50)) s["maxLength"] = pick(6) + (s.contains("minLength") ? s["minLength"].get<int>() : 0);
        return s;
      }
      case 1: {
        static const char* patterns[] = {"^[a-z]{1,5}$", "\\d{3}-\\d{2}", "(ab|cd)+x?", "[A-Z][a-z]*( [A-Z][a-z]*){0,2}", "é+[^a-z\"]{0,3}"};
        return {{"type", "string"}, {"pattern", patterns[pick(5)]}};
      }
      case 2: {
        static const char* formats[] = {"date", "time", "date-time", "uuid", "email"};
        return {{"type", "string"}, {"format", formats[pick(5)]}};
      }
      case 3: {
        Json s = {{"type", "integer"}};
        const int lo = pick(400) - 200;
        if (coin(60)) s[coin(50) ? "minimum" : "exclusiveMinimum"] = lo;
        if (coin(60)) s[coin(50) ? "maximum" : "exclusiveMaximum"] = lo + 2 + pick(3000);
        return s;
      }
      case 4: return {{"type", "number"}};
      case 5: return {{"type", "boolean"}};
      case 6: return {{"type", coin(50) ? Json("null") : Json::array({"string", "null"})}};
      case 7: return {{"enum", Json::array({"red", 7, nullptr, Json::object({{"k", Json::array({1, "two"})}}), "with \"quote\""})}};
      case 8: return {{"const", coin(50) ? Json("fixed") : Json(42)}};
      default: return {{"type", Json::array({"integer", "boolean", "string"})}, {"maxLength", 4}};
    }
  }

  Json node(int depth) {
    if (depth >= 3 || coin(35)) return leaf();
    switch (pick(6)) {
      case 0:
      case 1: {
        Json s = {{"type", "object"}, {"properties", Json::object()}};
        const int n = pick(5);
        Json required = Json::array();
        for (int i = 0; i < n; ++i) {
          const std::string k = name();
          s["properties"][k] = node(depth + 1);
          if (coin(50)) required.push_back(k);
        }
        if (!required.empty()) s["required"] = required;
        const int a = pick(4);
        if (a == 1) s["additionalProperties"] = false;
        if (a == 2) s["additionalProperties"] = leaf();
        if (a == 3) s["additionalProperties"] = true;
        return s;
      }
      case 2: {
        Json s = {{"type", "array"}};
        if (coin(30)) {
          s["prefixItems"] = Json::array({node(depth + 1), leaf()});
          if (coin(50)) s["items"] = leaf();
        } else {
          s["items"] = node(depth + 1);
        }
        if (coin(50)) s["minItems"] = pick(2);
        if (coin(50)) s["maxItems"] = pick(3) + (s.contains("minItems") ? s["minItems"].get<int>() : 0);
        return s;
      }
      case 3: return {{coin(50) ? "anyOf" : "oneOf", Json::array({node(depth + 1), leaf()})}};
      case 4: {
        // A recursive definition: a tree whose children are the same definition.
        const std::string def = "t" + std::to_string(defs_.size());
        defs_[def] = {{"type", "object"},
                      {"properties", {{"v", leaf()}, {"kids", {{"type", "array"}, {"items", {{"$ref", "#/$defs/" + def}}}, {"maxItems", 2}}}}},
                      {"required", Json::array({"v"})}};
        return {{"$ref", "#/$defs/" + def}};
      }
      default:
        return {{"allOf", Json::array({{{"type", "object"}, {"properties", {{"p", leaf()}}}, {"required", Json::array({"p"})}},
                                       {{"properties", {{"q", leaf()}}}}})}};
    }
  }

  std::mt19937_64 rng_;
  Json defs_;
};

// Samples with a pull toward finishing: now and then the stop token or a closing character
// when allowed, else uniform over the allowed tokens.
SampledOutput sample_toward_end(g::GrammarMatcher& m, std::mt19937_64& rng, int max_tokens) {
  const g::TokenVocabulary& v = m.grammar().vocabulary();
  return sample_under_mask(m, rng, max_tokens, [&v](const std::vector<int32_t>& ids, std::mt19937_64& r) {
    std::vector<int32_t> preferred;
    const int mode = static_cast<int>(r() % 4);
    for (int32_t id : ids) {
      if (mode == 0 && v.is_stop(id)) preferred.push_back(id);
      if (mode == 1 && !v.is_stop(id) && std::string_view("\"]},0123456789").find(v.bytes(id)[0]) != std::string_view::npos)
        preferred.push_back(id);
    }
    const std::vector<int32_t>& from = preferred.empty() ? ids : preferred;
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(r)];
  });
}

const char* kValidateScript = R"PY(
import json, re, sys
import jsonschema
cases = json.load(open(sys.argv[1]))
def any_of(s):  # the grammar reads oneOf as anyOf (docs/structured_output.md): check it so
    if isinstance(s, dict):
        return {("anyOf" if k == "oneOf" else k): any_of(v) for k, v in s.items()}
    if isinstance(s, list):
        return [any_of(v) for v in s]
    return s
errors = []
for i, c in enumerate(cases):
    try:
        if c["kind"] == "schema":
            value = json.loads(c["output"])
            jsonschema.Draft202012Validator(any_of(json.loads(c["schema"]))).validate(value)
        else:
            if re.fullmatch(c["schema"], c["output"], re.ASCII) is None:
                raise ValueError("no fullmatch")
    except Exception as e:
        errors.append({"case": i, "error": str(e)[:300]})
print(json.dumps({"checked": len(cases), "errors": errors}))
)PY";

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
      ASSERT_TRUE(out.alive) << vocab.name << ": the mask came up empty or allowed a refused token\n" << schema << "\n" << out.text;
      if (!out.ended) {
        ++run.capped;
        continue;
      }
      ++run.finished;
      batch.push_back({{"kind", "schema"}, {"schema", schema}, {"output", out.text}});
    }
  }
  // Regexes from a fixed list, sampled the same way.
  for (const char* re : {R"(\d{3}-\d{4})", R"([a-z]+(, [a-z]+)*\.)", R"((yes|no|maybe)!{0,3})", R"(\w{2,8}@\w{2,8}\.(com|org))",
                         R"(([01]\d|2[0-3]):[0-5]\d)", R"([^\n"]{1,10})", R"(é[αβγ]{2}\s?)"}) {
    auto compiled = g::compile_grammar(g::GrammarKind::kRegex, re, vocab.vocabulary);
    for (int o = 0; o < outputs_per_regex; ++o) {
      g::GrammarMatcher m(compiled);
      const SampledOutput out = sample_toward_end(m, rng, max_tokens);
      ASSERT_TRUE(out.alive) << vocab.name << " regex " << re;
      if (out.ended) batch.push_back({{"kind", "regex"}, {"schema", re}, {"output", out.text}});
    }
  }
  const nlohmann::json result = run_python(kValidateScript, batch);
  ASSERT_TRUE(result.is_object()) << "the Python check did not run";
  EXPECT_EQ(result["checked"].get<size_t>(), batch.size());
  for (const auto& e : result["errors"]) {
    const auto& c = batch[e["case"].get<size_t>()];
    ADD_FAILURE() << vocab.name << ": " << e["error"].get<std::string>() << "\n  schema: " << c["schema"].get<std::string>()
                  << "\n  output: " << c["output"].get<std::string>();
  }
  // Most outputs must finish, or the check proves little.
  EXPECT_GT(run.finished, (run.finished + run.capped) / 3) << vocab.name << " finished " << run.finished << " capped " << run.capped;
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
