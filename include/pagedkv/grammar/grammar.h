// A context-free grammar over bytes, in the shape of EBNF / GBNF: named rules whose bodies are
// expressions built from literals, character classes over Unicode code points (matched as their
// UTF-8 bytes), sequences, alternatives, bounded or unbounded repetition and references to rules
// (recursion allowed, left recursion refused when compiled).
//
// Every front end (GBNF text, regex, choice, JSON Schema: grammar/grammar_front_ends.h) builds one
// of these; the compiler (grammar/compiled_grammar.h) turns it into a byte-level pushdown automaton.
// Expressions live in one arena and are referred to by index, so a front end shares a
// sub-expression by using its index twice. The builder checks GrammarLimits::max_expressions and
// max_rules as it grows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/core/utf8.h"
#include "pagedkv/grammar/grammar_limits.h"

namespace pagedkv::grammar {

using ExprId = int32_t;
using RuleId = int32_t;

// An inclusive range of Unicode scalar values.
struct CodepointRange {
  uint32_t lo = 0, hi = 0;
};

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;
inline constexpr int32_t kUnbounded = -1;  // Expr::max of `*` and `+`

enum class ExprKind : uint8_t {
  kEmpty,  // matches the empty string
  kLiteral,  // the bytes in `bytes`
  kCharClass,  // one code point in `ranges` (sorted, disjoint, no surrogates), UTF-8 encoded
  kSequence,  // children in order
  kChoice,  // any one child
  kRepeat,  // children[0] between min and max times (max == kUnbounded: no upper bound)
  kRuleRef,  // the rule `rule`
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::string bytes;
  std::vector<CodepointRange> ranges;
  std::vector<ExprId> children;
  int32_t min = 0, max = 0;
  RuleId rule = -1;
};

struct Rule {
  std::string name;
  ExprId body = -1;  // -1 until defined
};

class Grammar {
 public:
  explicit Grammar(const GrammarLimits& limits = {}) : limits_(limits) {}

  // ---- building --------------------------------------------------------------------------------
  ExprId empty();
  ExprId literal(std::string_view bytes);
  // A class of code points; `negated` takes the complement within U+0000..U+10FFFF. Ranges may
  // overlap and come in any order; surrogates are dropped (they have no UTF-8 encoding).
  ExprId char_class(std::vector<CodepointRange> ranges, bool negated = false);
  ExprId sequence(std::vector<ExprId> children);
  ExprId choice(std::vector<ExprId> children);
  ExprId repeat(ExprId child, int32_t min, int32_t max);  // max == kUnbounded for no bound
  ExprId optional(ExprId child) { return repeat(child, 0, 1); }
  ExprId ref(RuleId rule);

  // A rule with this name (created undefined on first use); define_rule gives it a body.
  RuleId rule_named(std::string_view name);
  RuleId add_rule(std::string_view name_prefix);  // a new rule with a fresh name
  void define_rule(RuleId rule, ExprId body);
  void set_root(RuleId rule) { root_ = rule; }
  // Copies every rule and expression of `other` into this grammar (rule names get `name_prefix`
  // in front, so two imports never clash) and returns the rule that was `other`'s root: how a
  // grammar built by a front end becomes one part of a larger one.
  RuleId import_grammar(const Grammar& other, std::string_view name_prefix);

  // ---- reading ---------------------------------------------------------------------------------
  const Expr& expr(ExprId id) const { return exprs_[static_cast<size_t>(id)]; }
  const Rule& rule(RuleId id) const { return rules_[static_cast<size_t>(id)]; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  int32_t num_exprs() const { return static_cast<int32_t>(exprs_.size()); }
  RuleId root() const { return root_; }
  const GrammarLimits& limits() const { return limits_; }

  // Throws GrammarError if there is no root or a referenced rule has no body.
  void check_complete() const;

  // The grammar as GBNF text (one rule a line); parse_gbnf of it gives the same language.
  std::string to_gbnf() const;

 private:
  ExprId add(Expr e);

  GrammarLimits limits_;
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  RuleId root_ = -1;
};

// append_utf8: core/utf8.h.

}  // namespace pagedkv::grammar
