// libFuzzer target: the grammar layer. The first byte picks a front end (JSON Schema, regex,
// GBNF, choice), the second seeds the walk, the rest is the text. Compiled under small limits, the
// grammar must either fail with a GrammarError or drive a matcher on a small synthetic
// vocabulary where, at every step: the mask is never empty unless a stop token ended the output,
// every token the mask allows is accepted by stepping its bytes one at a time (and a sample of
// the others is refused), and rollback restores the mask exactly, compactions included.
// Anything else (another exception, a crash, a sanitizer report) is a bug. Built and run by
// scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/grammar/compiled_grammar.h"
#include "pagedkv/grammar/grammar_matcher.h"
#include "pagedkv/grammar/token_bitmask.h"

namespace {

namespace g = pagedkv::grammar;
using pagedkv::fuzz::check;

const std::shared_ptr<const g::TokenVocabulary>& vocabulary() {
  static const std::shared_ptr<const g::TokenVocabulary> v = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    tokens.emplace_back();  // 256: the stop token
    for (const char* t :
         {"\":", "\",\"", "\"}",    "{\"", "true", "false",         "null",     "12",   "ab",  "abc", "\\u00", "\\n",
          "é",   "\xC3",  "\xA9\"", "],",  "}]",   " \"",           "a\"",      "-1",   "0.5", "e+",  "::=",   "[a-z]",
          "()",  "*",     "aa",     "aaa", "ba",   "\u00e9t\u00e9", "\xE2\x82", "\xAC", "  ",  "\n",  "x\"}"})
      tokens.emplace_back(t);
    return g::TokenVocabulary::create(std::move(tokens), {256});
  }();
  return v;
}

// The reference: the token's bytes one at a time (stop tokens: iff the grammar can end).
bool reference_allows(g::GrammarMatcher& m, int32_t id) {
  const g::TokenVocabulary& v = m.grammar().vocabulary();
  if (m.is_terminated()) return false;
  if (v.is_stop(id)) return m.can_terminate();
  const std::string_view bytes = v.bytes(id);
  for (size_t i = 0; i < bytes.size(); ++i)
    if (!m.accept_bytes(bytes.substr(i, 1))) {
      m.rollback(static_cast<int32_t>(i));
      return false;
    }
  m.rollback(static_cast<int32_t>(bytes.size()));
  return !bytes.empty();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagedkv::fuzz::ByteReader r{data, size};
  static const g::GrammarKind kinds[] = {g::GrammarKind::kJsonSchema, g::GrammarKind::kRegex, g::GrammarKind::kGbnf,
                                         g::GrammarKind::kChoice};
  const g::GrammarKind kind = kinds[r.next() % 4];
  std::mt19937_64 rng(r.next());
  const std::string text(reinterpret_cast<const char*>(data) + std::min<size_t>(r.at, size),
                         size - std::min<size_t>(r.at, size));

  g::GrammarOptions options;
  options.limits.max_text_bytes = 4096;
  options.limits.max_nesting_depth = 16;
  options.limits.max_ref_depth = 8;
  options.limits.max_rules = 200;
  options.limits.max_expressions = 4000;
  options.limits.max_repeat_bound = 64;
  options.limits.max_enum_values = 64;
  options.limits.max_automaton_states = 4000;
  options.limits.compile_budget_ms = 200;
  options.json.allow_whitespace = (rng() & 1) != 0;
  options.json.max_whitespace = 2;
  std::shared_ptr<const g::CompiledGrammar> compiled;
  try {
    compiled = g::compile_grammar(kind, text, vocabulary(), options);
  } catch (const g::GrammarError&) {
    return 0;
  }
  const g::TokenVocabulary& v = *vocabulary();
  g::GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(static_cast<size_t>(v.bitmask_words()));
  std::vector<std::vector<uint32_t>> masks;
  for (int step = 0; step < 24; ++step) {
    m.fill_next_token_bitmask(mask);
    masks.push_back(mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < v.size(); ++id) {
      const bool fast = g::bitmask_allows(mask, id);
      if (fast) allowed.push_back(id);
      if (fast || rng() % 8 == 0) check(fast == reference_allows(m, id));
    }
    if (allowed.empty()) {
      check(m.is_terminated());
      break;
    }
    const int32_t id = allowed[rng() % allowed.size()];
    check(m.accept_token(id));
    if (rng() % 8 == 0) m.compact();
    if (m.num_steps() > 0 && rng() % 6 == 0) {
      const auto back = static_cast<int32_t>(1 + rng() % static_cast<uint64_t>(m.num_steps()));
      m.rollback(back);
      m.fill_next_token_bitmask(mask);
      check(mask == masks[static_cast<size_t>(m.num_steps())]);
      masks.resize(static_cast<size_t>(m.num_steps()));
    }
  }
  return 0;
}
