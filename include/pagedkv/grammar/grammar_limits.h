// The bounds every grammar compilation runs under, and the error that names a broken one.
//
// Grammars come from requests (a client's JSON Schema, regex or GBNF text), so each front end and
// the compiler check these limits as they go: a schema built to explode (10,000 nested levels, a
// 1 MB enum, `(a|a)*` repeated into a huge automaton) ends in a GrammarError that names the limit
// within the compile-time budget, never in a hang or an exhausted memory.
#pragma once

#include <cstdint>
#include <string>

#include "pagedkv/core/error.h"

namespace pagedkv::grammar {

// Bad grammar input: a syntax error, an unsupported JSON Schema keyword (named), or a limit below
// exceeded (named, with its value). Never thrown for a valid input within the limits.
class GrammarError : public Error {
 public:
  using Error::Error;
};

struct GrammarLimits {
  int64_t max_text_bytes = 256 * 1024;  // schema / regex / GBNF / choice text
  int32_t max_nesting_depth = 64;  // schema nesting, regex and GBNF group nesting
  int32_t max_ref_depth = 32;  // $ref chains followed while expanding one schema node
  int32_t max_rules = 20'000;  // rules of the grammar (schema nodes become rules)
  int32_t max_expressions = 200'000;  // expression nodes of the grammar
  int32_t max_repeat_bound = 10'000;  // m, n of {m,n}, minLength/maxLength, minItems/maxItems
  int32_t max_enum_values = 4'096;  // values of one enum / choice
  int32_t max_automaton_states = 100'000;  // NFA and DFA states of the compiled automaton, each
  int32_t compile_budget_ms = 500;  // wall time of one compilation before it gives up
  // Per-state token masks are precomputed during compilation for at most this long; the states
  // left over are computed on first use (the result is the same, only the first step is slower).
  int32_t precompute_budget_ms = 250;
};

// Builds the message "grammar limit <name> (<limit>) exceeded: <what>" used for every limit.
std::string limit_message(const char* name, int64_t limit, const std::string& what);

}  // namespace pagedkv::grammar
