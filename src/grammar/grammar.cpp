#include "pagedkv/grammar/grammar.h"

#include <algorithm>

#include <fmt/format.h>

namespace pagedkv::grammar {

std::string limit_message(const char* name, int64_t limit, const std::string& what) {
  return fmt::format("grammar limit {} ({}) exceeded: {}", name, limit, what);
}

ExprId Grammar::add(Expr e) {
  if (static_cast<int64_t>(exprs_.size()) >= limits_.max_expressions)
    throw GrammarError(
        limit_message("max_expressions", limits_.max_expressions, "the grammar has too many expressions"));
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::empty() { return add(Expr{}); }

ExprId Grammar::literal(std::string_view bytes) {
  if (bytes.empty()) return empty();
  Expr e;
  e.kind = ExprKind::kLiteral;
  e.bytes = std::string(bytes);
  return add(std::move(e));
}

ExprId Grammar::char_class(std::vector<CodepointRange> ranges, bool negated) {
  // Normalize: clamp, sort, merge, drop surrogates, then complement if asked.
  std::vector<CodepointRange> in;
  for (CodepointRange r : ranges) {
    if (r.lo > r.hi || r.lo > kMaxCodepoint) continue;
    r.hi = std::min(r.hi, kMaxCodepoint);
    in.push_back(r);
  }
  std::sort(in.begin(), in.end(), [](CodepointRange a, CodepointRange b) { return a.lo < b.lo; });
  std::vector<CodepointRange> merged;
  for (CodepointRange r : in) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) merged.back().hi = std::max(merged.back().hi, r.hi);
    else merged.push_back(r);
  }
  if (negated) {
    std::vector<CodepointRange> complement;
    uint32_t next = 0;
    for (CodepointRange r : merged) {
      if (r.lo > next) complement.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodepoint) complement.push_back({next, kMaxCodepoint});
    merged = std::move(complement);
  }
  std::vector<CodepointRange> out;
  for (CodepointRange r : merged) {  // cut out U+D800..U+DFFF
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  Expr e;
  e.kind = ExprKind::kCharClass;
  e.ranges = std::move(out);
  return add(std::move(e));
}

ExprId Grammar::sequence(std::vector<ExprId> children) {
  if (children.empty()) return empty();
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kSequence;
  e.children = std::move(children);
  return add(std::move(e));
}

ExprId Grammar::choice(std::vector<ExprId> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kChoice;  // no children: matches nothing
  e.children = std::move(children);
  return add(std::move(e));
}

ExprId Grammar::repeat(ExprId child, int32_t min, int32_t max) {
  const int32_t bound = limits_.max_repeat_bound;
  if (min < 0 || (max != kUnbounded && max < min))
    throw GrammarError(fmt::format("invalid repetition bounds {{{},{}}}", min, max));
  if (min > bound || max > bound)
    throw GrammarError(limit_message("max_repeat_bound", bound, fmt::format("repetition {{{},{}}}", min, max)));
  if (min == 1 && max == 1) return child;
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

ExprId Grammar::ref(RuleId rule) {
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return add(std::move(e));
}

RuleId Grammar::rule_named(std::string_view name) {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<RuleId>(i);
  if (static_cast<int64_t>(rules_.size()) >= limits_.max_rules)
    throw GrammarError(limit_message("max_rules", limits_.max_rules, "the grammar has too many rules"));
  rules_.push_back(Rule{std::string(name), -1});
  return static_cast<RuleId>(rules_.size() - 1);
}

RuleId Grammar::add_rule(std::string_view name_prefix) {
  if (static_cast<int64_t>(rules_.size()) >= limits_.max_rules)
    throw GrammarError(limit_message("max_rules", limits_.max_rules, "the grammar has too many rules"));
  rules_.push_back(Rule{fmt::format("{}-{}", name_prefix, rules_.size()), -1});
  return static_cast<RuleId>(rules_.size() - 1);
}

void Grammar::define_rule(RuleId rule, ExprId body) { rules_[static_cast<size_t>(rule)].body = body; }

RuleId Grammar::import_grammar(const Grammar& other, std::string_view name_prefix) {
  other.check_complete();
  std::vector<RuleId> rules;
  for (const Rule& r : other.rules_) rules.push_back(add_rule(fmt::format("{}{}", name_prefix, r.name)));
  // Appended in order, expression i of `other` becomes base + i (children come before parents
  // or anywhere else in the arena: every index shifts by the same amount).
  const ExprId base = num_exprs();
  for (const Expr& from : other.exprs_) {
    Expr e = from;
    for (ExprId& c : e.children) c += base;
    if (e.kind == ExprKind::kRuleRef) e.rule = rules[static_cast<size_t>(e.rule)];
    add(std::move(e));
  }
  for (size_t i = 0; i < other.rules_.size(); ++i) define_rule(rules[i], other.rules_[i].body + base);
  return rules[static_cast<size_t>(other.root_)];
}

void Grammar::check_complete() const {
  if (root_ < 0) throw GrammarError("the grammar has no root rule");
  for (const Rule& r : rules_)
    if (r.body < 0) throw GrammarError(fmt::format("rule '{}' is used but never defined", r.name));
}

namespace {

void append_class_char(std::string& out, uint32_t cp) {
  if (cp == ']' || cp == '\\' || cp == '-' || cp == '^' || cp < 0x20 || cp == 0x7F) out += fmt::format("\\x{:02X}", cp);
  else append_utf8(out, cp);
}

void append_expr(const Grammar& g, ExprId id, std::string& out) {
  const Expr& e = g.expr(id);
  switch (e.kind) {
    case ExprKind::kEmpty:
      out += "\"\"";
      break;
    case ExprKind::kLiteral:
      out += '"';
      for (unsigned char c : e.bytes) {
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x7F) out += fmt::format("\\x{:02X}", c);
        else out += static_cast<char>(c);
      }
      out += '"';
      break;
    case ExprKind::kCharClass:
      out += '[';
      for (const CodepointRange& r : e.ranges) {
        if (r.lo > 0xFF || r.hi > 0xFF) {  // \x only covers a byte: write code points
          out += fmt::format("\\U{:08X}", r.lo);
          if (r.hi != r.lo) out += fmt::format("-\\U{:08X}", r.hi);
          continue;
        }
        append_class_char(out, r.lo);
        if (r.hi != r.lo) {
          out += '-';
          append_class_char(out, r.hi);
        }
      }
      out += ']';
      break;
    case ExprKind::kSequence:
    case ExprKind::kChoice:
      out += '(';
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i) out += e.kind == ExprKind::kChoice ? " | " : " ";
        append_expr(g, e.children[i], out);
      }
      if (e.children.empty()) out += "[^\\x00-\\U0010FFFF]";
      out += ')';
      break;
    case ExprKind::kRepeat:
      out += '(';
      append_expr(g, e.children[0], out);
      out += ')';
      if (e.max == kUnbounded) out += fmt::format("{{{},}}", e.min);
      else out += fmt::format("{{{},{}}}", e.min, e.max);
      break;
    case ExprKind::kRuleRef:
      out += g.rule(e.rule).name;
      break;
  }
}

}  // namespace

std::string Grammar::to_gbnf() const {
  std::string out;
  if (root_ >= 0 && rule(root_).name != "root") out += "root ::= " + rule(root_).name + "\n";
  for (const Rule& r : rules_) {
    out += r.name;
    out += " ::= ";
    if (r.body >= 0) append_expr(*this, r.body, out);
    out += '\n';
  }
  return out;
}

}  // namespace pagedkv::grammar
