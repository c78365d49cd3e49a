// GrammarMatcher against a slow reference, on random walks: the mask allows exactly the tokens
// whose bytes step through the grammar one at a time (reference_allows); the mask is never empty
// while the grammar can go on; rollback restores the exact mask; stop tokens only when the
// grammar can end. Vocabularies: a synthetic byte vocabulary, tok512, and (fewer steps, a sample
// of the ids) the 32K / 128K / 152K vocabularies of the shared folder.
#include <cmath>
#include <thread>

#include "grammar_test_support.h"
#include "pagedkv/grammar/grammar_cache.h"

namespace pagedkv::testing {
namespace {

using g::GrammarKind;

struct GrammarCase {
  GrammarKind kind;
  const char* text;
};

const std::vector<GrammarCase>& grammar_cases() {
  static const std::vector<GrammarCase> cases = {
      {GrammarKind::kJsonSchema,
       R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},
           "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"enum":["a","bb","c c"]},"maxItems":3},
           "score":{"type":"number"},"ok":{"type":"boolean"},"note":{"type":["string","null"]}},"required":["name","age"]})"},
      {GrammarKind::kJsonSchema,
       R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/n"})"},
      {GrammarKind::kJsonObject, ""},
      // Long bounded repetitions: positions far from the bound share their short tokens' classes.
      {GrammarKind::kJsonSchema,
       R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":40},"maxItems":3})"},
      {GrammarKind::kRegex, R"([a-zé ]{3,50}x|\d{20,30})"},
      {GrammarKind::kRegex, R"((\d{1,3}\.){3}\d{1,3}|[a-z]+@[a-z]+\.(com|org))"},
      {GrammarKind::kChoice, R"(["positive", "negative", "neutral", "pos"])"},
      {GrammarKind::kGbnf, R"gbnf(root ::= expr
                               expr ::= term (("+" | "-") term)*
                               term ::= [0-9]+ | "(" expr ")")gbnf"},
  };
  return cases;
}

// Compares the mask with the reference on `ids` (all of them, or a sample).
void expect_mask_matches_reference(g::GrammarMatcher& m, std::span<const uint32_t> mask,
                                   const std::vector<int32_t>& ids, const std::string& where) {
  for (int32_t id : ids) {
    const bool fast = g::bitmask_allows(mask, id);
    const bool slow = reference_allows(m, id);
    ASSERT_EQ(fast, slow) << where << " token " << id << " '" << m.grammar().vocabulary().bytes(id) << "'";
  }
}

void random_walks(const std::shared_ptr<const g::TokenVocabulary>& vocab, const std::string& vocab_name, int walks,
                  int max_steps, int sample_ids) {
  std::mt19937_64 rng(1234);
  for (const GrammarCase& c : grammar_cases()) {
    auto compiled = g::compile_grammar(c.kind, c.text, vocab);
    for (int w = 0; w < walks; ++w) {
      g::GrammarMatcher m(compiled);
      std::vector<std::vector<uint32_t>> masks;
      std::vector<uint32_t> mask(static_cast<size_t>(vocab->bitmask_words()));
      for (int step = 0; step < max_steps; ++step) {
        m.fill_next_token_bitmask(mask);
        masks.push_back(mask);
        const std::vector<int32_t> allowed = allowed_ids(mask, vocab->size());
        const std::string where = vocab_name + " " + g::grammar_kind_name(c.kind) + " walk " + std::to_string(w) +
                                  " step " + std::to_string(step);
        ASSERT_FALSE(allowed.empty()) << where << ": the mask allows nothing";
        std::vector<int32_t> check_ids;
        if (sample_ids <= 0) {
          for (int32_t id = 0; id < vocab->size(); ++id) check_ids.push_back(id);
        } else {  // a sample of the allowed ids and of all ids
          for (int i = 0; i < sample_ids; ++i)
            check_ids.push_back(allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]);
          for (int i = 0; i < sample_ids; ++i)
            check_ids.push_back(std::uniform_int_distribution<int32_t>(0, vocab->size() - 1)(rng));
        }
        expect_mask_matches_reference(m, mask, check_ids, where);
        if (::testing::Test::HasFatalFailure()) return;
        // Prefer continuing: stop only sometimes when the grammar can end.
        int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        if (vocab->is_stop(id) && rng() % 4 != 0) {
          std::vector<int32_t> going_on;
          for (int32_t a : allowed)
            if (!vocab->is_stop(a)) going_on.push_back(a);
          if (!going_on.empty()) id = going_on[std::uniform_int_distribution<size_t>(0, going_on.size() - 1)(rng)];
        }
        ASSERT_TRUE(m.accept_token(id)) << where;
        if (vocab->is_stop(id)) {
          EXPECT_TRUE(m.is_terminated());
          m.fill_next_token_bitmask(mask);
          EXPECT_TRUE(allowed_ids(mask, vocab->size()).empty());
          EXPECT_FALSE(m.accept_token(id));
          break;
        }
        // Now and then, undo a few steps and check the mask is exactly what it was.
        if (rng() % 5 == 0 && m.num_steps() > 0) {
          const int32_t back = std::uniform_int_distribution<int32_t>(1, m.num_steps())(rng);
          m.rollback(back);
          m.fill_next_token_bitmask(mask);
          ASSERT_EQ(mask, masks[static_cast<size_t>(m.num_steps())]) << where << " after rollback(" << back << ")";
          masks.resize(static_cast<size_t>(m.num_steps()));
          step = m.num_steps() - 1;
        }
      }
    }
  }
}

TEST(GrammarMatcher, MaskEqualsReferenceOnByteVocabulary) { random_walks(byte_vocabulary(), "bytes", 12, 40, 0); }

TEST(GrammarMatcher, MaskEqualsReferenceOnTok512) {
  const auto paths = shared_vocabulary_paths(false);
  if (paths.empty()) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models/stories260Ktok512.gguf is absent";
  const LoadedVocabulary v = load_gguf_vocabulary(paths[0]);
  random_walks(v.vocabulary, v.name, 8, 40, 0);
}

TEST(GrammarMatcher, MaskEqualsReferenceOnLargeVocabularies) {
  const auto paths = shared_vocabulary_paths(true);
  if (paths.size() < 2) GTEST_SKIP() << "the shared big vocabularies (models/gguf/vocab) are absent";
  const int steps = env_int("PAGEDKV_GRAMMAR_BIG_STEPS", 10);
  for (size_t i = 1; i < paths.size(); ++i) {
    const LoadedVocabulary v = load_gguf_vocabulary(paths[i]);
    random_walks(v.vocabulary, v.name, 1, steps, 2000);
    if (HasFatalFailure()) return;
  }
}

TEST(GrammarMatcher, StopTokensOnlyWhenComplete) {
  auto compiled = g::compile_grammar(GrammarKind::kRegex, "ab(cd)?", byte_vocabulary());
  g::GrammarMatcher m(compiled);
  EXPECT_FALSE(m.accept_token(256));
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_TRUE(m.accept_bytes(""));  // reads nothing: one step, same position
  EXPECT_TRUE(m.can_terminate());
  m.rollback(1);
  EXPECT_FALSE(m.accept_bytes("x"));
  EXPECT_EQ(m.num_steps(), 1);
  EXPECT_TRUE(m.accept_token('c'));
  EXPECT_FALSE(m.can_terminate());
  EXPECT_FALSE(m.accept_token(256));
  EXPECT_TRUE(m.accept_token('d'));
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.can_terminate());
  m.reset();
  EXPECT_EQ(m.num_steps(), 0);
  EXPECT_THROW(m.rollback(1), UsageError);
  EXPECT_THROW(m.accept_token(100000), UsageError);
  // Copies are independent.
  EXPECT_TRUE(m.accept_bytes("a"));
  g::GrammarMatcher copy = m;
  EXPECT_TRUE(copy.accept_bytes("b"));
  EXPECT_FALSE(m.can_terminate());
  EXPECT_TRUE(copy.can_terminate());
}

TEST(GrammarMatcher, ApplyBitmaskSetsDisallowedToMinusInfinity) {
  std::vector<float> logits(70);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i);
  std::vector<uint32_t> mask(3, 0u);
  for (int32_t id : {0, 5, 31, 32, 64, 69}) mask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  mask[2] |= 1u << 31;  // past the logits: ignored
  g::apply_token_bitmask(logits, mask);
  EXPECT_THROW(g::apply_token_bitmask(logits, std::span<const uint32_t>(mask).first(2)), UsageError);
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool allowed = i == 0 || i == 5 || i == 31 || i == 32 || i == 64 || i == 69;
    if (allowed) EXPECT_EQ(logits[i], static_cast<float>(i));
    else EXPECT_TRUE(std::isinf(logits[i]) && logits[i] < 0) << i;
  }
}

// With no precompute budget every state is classified on first use; threads racing over the
// same states must see exactly the masks of a fully precomputed compilation.
TEST(GrammarMatcher, LazyStateClassificationIsThreadSafe) {
  const auto paths = shared_vocabulary_paths(false);
  const std::shared_ptr<const g::TokenVocabulary> vocab =
      paths.empty() ? byte_vocabulary() : load_gguf_vocabulary(paths[0]).vocabulary;
  const GrammarCase& c = grammar_cases()[0];
  g::GrammarOptions lazy_options;
  lazy_options.limits.precompute_budget_ms = 0;
  auto eager = g::compile_grammar(c.kind, c.text, vocab);
  auto lazy = g::compile_grammar(c.kind, c.text, vocab, lazy_options);
  EXPECT_GT(eager->num_precomputed_states(), 0);
  EXPECT_EQ(lazy->num_precomputed_states(), 0);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t % 2));  // two pairs of threads walk the same path
      g::GrammarMatcher a(eager), b(lazy);
      std::vector<uint32_t> ma(static_cast<size_t>(vocab->bitmask_words())), mb(ma.size());
      for (int step = 0; step < 60; ++step) {
        a.fill_next_token_bitmask(ma);
        b.fill_next_token_bitmask(mb);
        if (ma != mb) ++mismatches[static_cast<size_t>(t)];
        const std::vector<int32_t> ids = allowed_ids(ma, vocab->size());
        if (ids.empty()) break;
        const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
        if (vocab->is_stop(id) || !a.accept_token(id) || !b.accept_token(id)) break;
      }
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// A long output: the matcher's node pool is compacted several times on the way (it keeps what
// the history reaches); masks stay exact and old positions stay reachable by rollback.
TEST(GrammarMatcher, LongGenerationsStayExact) {
  const auto paths = shared_vocabulary_paths(false);
  const std::shared_ptr<const g::TokenVocabulary> vocab =
      paths.empty() ? byte_vocabulary() : load_gguf_vocabulary(paths[0]).vocabulary;
  auto compiled = g::compile_grammar(GrammarKind::kGbnf, R"gbnf(root ::= ("[" item ("," item)* "]")+
      item ::= [a-z]+ | "[" item ("," item)* "]" | "{" [a-z]* "}")gbnf",
                                     vocab);
  g::GrammarMatcher m(compiled);
  std::mt19937_64 rng(99);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->bitmask_words())), early;
  std::vector<int32_t> all(static_cast<size_t>(vocab->size()));
  for (int32_t id = 0; id < vocab->size(); ++id) all[static_cast<size_t>(id)] = id;
  for (int step = 0; step < 3000; ++step) {
    m.fill_next_token_bitmask(mask);
    if (step == 10) early = mask;
    if (step % 250 == 0) {
      expect_mask_matches_reference(m, mask, all, "long walk step " + std::to_string(step));
      if (HasFatalFailure()) return;
    }
    std::vector<int32_t> ids;
    for (int32_t id : allowed_ids(mask, vocab->size()))
      if (!vocab->is_stop(id)) ids.push_back(id);
    ASSERT_FALSE(ids.empty()) << step;
    ASSERT_TRUE(m.accept_token(ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)]));
    if (step % 97 == 0) m.compact();  // also done on its own once the pool grows
  }
  m.rollback(m.num_steps() - 10);
  m.fill_next_token_bitmask(mask);
  EXPECT_EQ(mask, early);
}

// Tokens whose lengths, in bytes and in characters, sit around the bounds of the length tests:
// runs of 1-, 2-, 3- and 4-byte characters and of escapes, with and without a closing quote,
// pieces of characters and escapes, and random mixes of all of these.
std::shared_ptr<const g::TokenVocabulary> length_vocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.emplace_back();  // 256: stop
  auto times = [](const std::string& unit, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += unit;
    return out;
  };
  for (int n : {2, 3, 4, 5, 6, 15, 16, 17, 18, 33, 63, 64, 65, 199, 200, 201}) {
    tokens.push_back(times("a", n));
    tokens.push_back(times("a", n - 1) + "\"");
    tokens.push_back(times("a", n - 1) + "\",");
  }
  for (int n = 1; n <= 18; ++n) {
    tokens.push_back(times("é", n));
    tokens.push_back(times("é", n) + "\"");
    if (n <= 8) tokens.push_back(times("中", n));
    if (n <= 6) tokens.push_back(times("😀", n) + (n % 2 ? "\"" : ""));
    if (n <= 6) tokens.push_back(times("\\n", n));
    if (n <= 4) tokens.push_back(times("\\u00e9", n) + (n % 2 ? "" : "\""));
  }
  for (const char* t :
       {"\\",       "\\u",      "\\u0",         "\\u00",      "\\u00e", "00e9", "e9",     "9\"",      "\\\"",  "\\\\",
        "\\/",      "a\\",      "a\\u4e2d",     "4e2d\"",     "\xC3",   "\xA9", "\xA9\"", "\xE4\xB8", "\xAD",  "\xAD\"",
        "\xF0\x9F", "\x98\x80", "\xF0\x9F\x98", "\"",         "\",",    "\"}",  "\"]",    "\":",      "\",\"", "{\"",
        "[\"",      "}",        "\"t\":\"",     "\",\"t\":\""})
    tokens.emplace_back(t);
  std::mt19937_64 rng(5);
  const std::vector<std::string> pieces = {"a", "é", "中", "😀", "\\n", "\\u00e9", "\\\"", "\"", ",", "b"};
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int n = std::uniform_int_distribution<int>(1, 24)(rng);
    for (int k = 0; k < n; ++k) t += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    tokens.push_back(t);
  }
  return g::TokenVocabulary::create(std::move(tokens), {256});
}

// Code points of a decoded JSON string (valid UTF-8).
int64_t count_code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Length bounds near the tokens' lengths: on walks that prefer to go on writing (so they reach
// the bounds), the mask equals the reference for every token, with the precomputed classes and
// with classes computed on first use; finished outputs hold strings within the bounds, counted
// in characters (an escape is one).
TEST(GrammarMatcher, LengthBoundsNearTokenLengthsMatchReference) {
  const auto vocab = length_vocabulary();
  std::vector<int32_t> all(static_cast<size_t>(vocab->size()));
  for (int32_t id = 0; id < vocab->size(); ++id) all[static_cast<size_t>(id)] = id;
  std::vector<std::pair<std::string, std::pair<int, int>>> schemas;  // schema, (min, max) of "s"
  for (int max : {0, 1, 2, 3, 5, 17, 64, 200}) {
    schemas.push_back({fmt::format(R"({{"type":"string","maxLength":{}}})", max), {0, max}});
    const int min = std::min(max, max / 2 + 1);
    schemas.push_back({fmt::format(R"({{"type":"string","minLength":{},"maxLength":{}}})", min, max), {min, max}});
    schemas.push_back({fmt::format(R"({{"type":"object","properties":{{"s":{{"type":"string","maxLength":{}}},)"
                                   R"("t":{{"type":"string","minLength":1,"maxLength":{}}}}},"required":["s","t"]}})",
                                   max, max + 2),
                       {0, max}});
  }
  for (int min : {1, 3, 17}) schemas.push_back({fmt::format(R"({{"type":"string","minLength":{}}})", min), {min, -1}});
  schemas.push_back({R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":5},"maxItems":4})", {2, 5}});
  std::mt19937_64 rng(77);
  g::GrammarOptions lazy_options;
  lazy_options.limits.precompute_budget_ms = 0;
  for (const auto& [schema, bounds] : schemas) {
    for (int lazy = 0; lazy < 2; ++lazy) {
      auto compiled =
          g::compile_grammar(GrammarKind::kJsonSchema, schema, vocab, lazy ? lazy_options : g::GrammarOptions{});
      for (int walk = 0; walk < 2; ++walk) {
        g::GrammarMatcher m(compiled);
        std::vector<uint32_t> mask(static_cast<size_t>(vocab->bitmask_words()));
        std::string text;
        bool ended = false;
        for (int step = 0; step < 120 && !ended; ++step) {
          m.fill_next_token_bitmask(mask);
          const std::string where =
              schema + (lazy ? " lazy" : "") + " walk " + std::to_string(walk) + " after '" + text + "'";
          expect_mask_matches_reference(m, mask, all, where);
          if (HasFatalFailure()) return;
          const std::vector<int32_t> allowed = allowed_ids(mask, vocab->size());
          ASSERT_FALSE(allowed.empty()) << where;
          // Mostly tokens without a quote (keep writing), longer ones first half the time.
          std::vector<int32_t> writing;
          for (int32_t id : allowed)
            if (!vocab->is_stop(id) && vocab->bytes(id).find('"') == std::string_view::npos) writing.push_back(id);
          const std::vector<int32_t>& pool = !writing.empty() && rng() % 8 != 0 ? writing : allowed;
          int32_t id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
          if (rng() % 2 == 0)
            for (int32_t c : pool)
              if (vocab->bytes(c).size() > vocab->bytes(id).size()) id = c;
          ASSERT_TRUE(m.accept_token(id)) << where;
          ended = vocab->is_stop(id);
          if (!ended) text += vocab->bytes(id);
        }
        if (!ended) continue;
        const nlohmann::json out = nlohmann::json::parse(text);
        std::vector<std::string> strings;
        if (out.is_string()) strings.push_back(out.get<std::string>());
        if (out.is_object()) strings.push_back(out["s"].get<std::string>());
        if (out.is_array())
          for (const auto& e : out) strings.push_back(e.get<std::string>());
        for (const std::string& str : strings) {
          EXPECT_GE(count_code_points(str), bounds.first) << schema << " " << text;
          if (bounds.second >= 0) {
            EXPECT_LE(count_code_points(str), bounds.second) << schema << " " << text;
          }
        }
      }
    }
  }
}

TEST(GrammarCache, HitsShareOneCompilationAcrossThreads) {
  g::GrammarCache cache(byte_vocabulary(), 2);
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
  std::vector<std::shared_ptr<const g::CompiledGrammar>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { got[i] = cache.get(GrammarKind::kJsonSchema, schema); });
  for (auto& t : threads) t.join();
  for (const auto& p : got) EXPECT_EQ(p.get(), got[0].get());
  EXPECT_EQ(cache.misses(), 1);
  EXPECT_EQ(cache.hits(), 7);
  // The same text as another kind is another entry; LRU evicts the oldest beyond capacity.
  cache.get(GrammarKind::kRegex, schema.substr(0, 5));
  cache.get(GrammarKind::kRegex, "abc");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.get(GrammarKind::kJsonSchema, schema).get(), got[0].get());  // was evicted, compiled again
  // Failures are thrown to every caller and not cached.
  const int64_t misses = cache.misses();
  EXPECT_THROW(cache.get(GrammarKind::kRegex, "(a"), g::GrammarError);
  EXPECT_THROW(cache.get(GrammarKind::kRegex, "(a"), g::GrammarError);
  EXPECT_EQ(cache.misses(), misses + 2);
}

}  // namespace
}  // namespace pagedkv::testing
