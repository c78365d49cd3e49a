// The front ends: each turns one kind of request text into a Grammar (grammar/grammar.h), checking
// GrammarLimits as it reads, and throws GrammarError naming the problem (a syntax error with its
// offset, an unsupported keyword or regex feature, a limit).
//
//  - GBNF (llama.cpp's grammar syntax): `name ::= alternatives`, "literals", [classes], [^negated],
//    `.`, ( groups ), postfix * + ? {m} {m,} {m,n}, # comments; the rule `root` is the start.
//  - Regex (the subset JSON Schema `pattern` and vLLM's `regex` use): literals, escapes, classes
//    with \d \w \s \D \W \S, `.` (any code point but \n), groups (capturing or (?:...)),
//    alternation, * + ? {m} {m,} {m,n} (lazy forms read as greedy: the language is the same),
//    ^ and $ only at the ends. Back-references and look-around are refused. The whole output must
//    match (re.fullmatch semantics).
//  - Choice: one of N strings, given as a JSON array of strings.
//  - JSON Schema: see grammar/json_schema_grammar.h.
#pragma once

#include <string_view>
#include <vector>

#include "pagedkv/grammar/grammar.h"

namespace pagedkv::grammar {

Grammar parse_gbnf(std::string_view text, const GrammarLimits& limits = {});

Grammar regex_grammar(std::string_view pattern, const GrammarLimits& limits = {});

// Adds the regex as an expression of `g` (for JSON Schema `pattern`). When `json_string_safe`,
// every character class and literal excludes '"', '\\' and control characters, so the match can
// be written inside a JSON string without escapes.
ExprId add_regex(Grammar& g, std::string_view pattern, bool json_string_safe);

Grammar choice_grammar(const std::vector<std::string>& choices, const GrammarLimits& limits = {});
// `json_array` is a JSON array of strings, e.g. ["yes", "no"].
Grammar choice_grammar_from_json(std::string_view json_array, const GrammarLimits& limits = {});

}  // namespace pagedkv::grammar
