// Compilation: (kind, text, vocabulary, options) -> a CompiledGrammar, shared by every request
// that asks for the same output format.
//
// A compiled grammar is a byte-level pushdown automaton (each rule a DFA over bytes whose edges
// may also call other rules) plus, for every automaton state a token can start from, the
// vocabulary split three ways (XGrammar's idea): tokens accepted whatever the stack below holds,
// tokens rejected whatever it holds, and the few "uncertain" ones that leave the rule and must be
// checked against the real stack at run time. compile_grammar is a pure function of its
// arguments: call it on any thread (the engine thread need not wait for it); the result is
// immutable and safe to share (per-state masks not precomputed within the budget are filled in
// on first use, each under a lock-free install).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "pagedkv/grammar/grammar.h"
#include "pagedkv/grammar/grammar_limits.h"
#include "pagedkv/grammar/json_schema_grammar.h"
#include "pagedkv/grammar/token_vocabulary.h"

namespace pagedkv::grammar {

// What the request's text is (vLLM's structured_outputs fields; OpenAI's response_format).
enum class GrammarKind : uint8_t {
  kJsonSchema,  // text: a JSON Schema
  kJsonObject,  // text ignored: any JSON object
  kRegex,  // text: a regex the whole output must match
  kChoice,  // text: a JSON array of strings, the output is one of them
  kGbnf,  // text: a GBNF grammar with a `root` rule
};
const char* grammar_kind_name(GrammarKind kind);

struct GrammarOptions {
  GrammarLimits limits;
  JsonFormatOptions json;  // whitespace policy of kJsonSchema / kJsonObject
};

// The Grammar of a request (the front end for `kind`). Throws GrammarError.
Grammar build_grammar(GrammarKind kind, std::string_view text, const GrammarOptions& options = {});

class CompiledGrammar {
 public:
  ~CompiledGrammar();
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const TokenVocabulary& vocabulary() const;
  const std::shared_ptr<const TokenVocabulary>& vocabulary_ptr() const;
  int32_t num_states() const;  // automaton states (all rules)
  int32_t num_rules() const;
  int32_t num_precomputed_states() const;  // states whose token classes were built at compile time
  double compile_ms() const;  // wall time compile_grammar took

  // The automaton and per-state token classes: private to grammar/ (src/grammar/), read by
  // GrammarMatcher.
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  friend std::shared_ptr<const CompiledGrammar> compile_grammar(const Grammar&, std::shared_ptr<const TokenVocabulary>,
                                                                const GrammarLimits&);
  explicit CompiledGrammar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Compiles a Grammar for `vocabulary`. Throws GrammarError (left recursion, an undefined rule, a
// limit such as max_automaton_states or compile_budget_ms).
std::shared_ptr<const CompiledGrammar> compile_grammar(const Grammar& grammar,
                                                       std::shared_ptr<const TokenVocabulary> vocabulary,
                                                       const GrammarLimits& limits = {});

// build_grammar then compile_grammar, with the text size checked first.
std::shared_ptr<const CompiledGrammar> compile_grammar(GrammarKind kind, std::string_view text,
                                                       std::shared_ptr<const TokenVocabulary> vocabulary,
                                                       const GrammarOptions& options = {});

}  // namespace pagedkv::grammar
