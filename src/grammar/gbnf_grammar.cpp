// GBNF text -> Grammar, and the choice front end. GBNF is read as llama.cpp writes it: a rule is
// `name ::= body`, and a body runs until the next `name ::=` (so rules may span lines).
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagedkv/grammar/grammar_front_ends.h"
#include "text_scanning.h"

namespace pagedkv::grammar {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(Grammar& g, std::string_view text) : g_(g), s_(text) {}

  void parse() {
    skip_space();
    while (!at_end()) {
      const std::string name = read_name();
      skip_space();
      if (s_.substr(pos_, 3) != "::=") fail(fmt::format("expected '::=' after rule name '{}'", name));
      pos_ += 3;
      const RuleId rule = g_.rule_named(name);
      if (g_.rule(rule).body >= 0) fail(fmt::format("rule '{}' is defined twice", name));
      g_.define_rule(rule, alternatives(0));
      skip_space();
    }
    RuleId root = -1;
    for (RuleId r = 0; r < g_.num_rules(); ++r)
      if (g_.rule(r).name == "root") root = r;
    if (root < 0) throw GrammarError("GBNF grammar has no 'root' rule");
    g_.set_root(root);
    g_.check_complete();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError(fmt::format("GBNF error at offset {}: {}", pos_, what));
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }

  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }

  // The next thing is `name ::=`: the current rule's body has ended.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  ExprId alternatives(int depth) {
    if (depth > g_.limits().max_nesting_depth)
      throw GrammarError(
          limit_message("max_nesting_depth", g_.limits().max_nesting_depth, "GBNF groups nest too deep"));
    std::vector<ExprId> branches{sequence(depth)};
    while (!at_end() && peek() == '|') {
      ++pos_;
      branches.push_back(sequence(depth));
    }
    return g_.choice(std::move(branches));
  }

  ExprId sequence(int depth) {
    std::vector<ExprId> items;
    while (true) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')' || at_rule_start()) break;
      items.push_back(postfix(primary(depth)));
    }
    return g_.sequence(std::move(items));
  }

  int32_t read_int() {
    int64_t v = 0;
    const size_t start = pos_;
    while (!at_end() && peek() >= '0' && peek() <= '9')
      v = std::min<int64_t>(v * 10 + (s_[pos_++] - '0'), int64_t{1} << 40);
    if (pos_ == start) fail("expected a number");
    if (v > g_.limits().max_repeat_bound)
      throw GrammarError(limit_message("max_repeat_bound", g_.limits().max_repeat_bound, "GBNF repetition"));
    return static_cast<int32_t>(v);
  }

  ExprId postfix(ExprId e) {
    while (!at_end()) {
      const char c = peek();
      if (c == '*') {
        ++pos_;
        e = g_.repeat(e, 0, kUnbounded);
      } else if (c == '+') {
        ++pos_;
        e = g_.repeat(e, 1, kUnbounded);
      } else if (c == '?') {
        ++pos_;
        e = g_.repeat(e, 0, 1);
      } else if (c == '{') {
        ++pos_;
        skip_space();
        const int32_t min = read_int();
        int32_t max = min;
        skip_space();
        if (!at_end() && peek() == ',') {
          ++pos_;
          skip_space();
          max = (!at_end() && peek() == '}') ? kUnbounded : read_int();
          skip_space();
        }
        if (at_end() || peek() != '}') fail("expected '}'");
        ++pos_;
        e = g_.repeat(e, min, max);
      } else {
        break;
      }
    }
    return e;
  }

  // One character of a literal or class: an escape or a UTF-8 code point.
  uint32_t character() {
    if (peek() != '\\') {
      uint32_t cp = 0;
      if (!decode_utf8(s_, pos_, cp)) fail("invalid UTF-8");
      return cp;
    }
    ++pos_;
    if (at_end()) fail("a trailing backslash");
    const char c = s_[pos_++];
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int i = 0; i < n; ++i) {
        if (at_end() || hex_value(peek()) < 0) fail("expected a hex digit");
        v = v * 16 + static_cast<uint32_t>(hex_value(s_[pos_++]));
      }
      return v;
    };
    switch (c) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '0':
        return 0;
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U': {
        const uint32_t v = hex(8);
        if (v > kMaxCodepoint) fail("code point out of range");
        return v;
      }
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
      case '\'':
        return static_cast<unsigned char>(c);
      default:
        fail(fmt::format("unknown escape '\\{}'", c));
    }
  }

  ExprId primary(int depth) {
    const char c = peek();
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (true) {
        if (at_end()) fail("unterminated literal");
        if (peek() == '"') break;
        const bool escaped = peek() == '\\';
        const size_t start = pos_;
        const uint32_t cp = character();
        // \xHH stands for a raw byte (llama.cpp reads it as a code point below 256; for ASCII
        // both agree), anything else for its UTF-8 encoding.
        if (escaped && s_[start + 1] == 'x' && cp >= 0x80) bytes += static_cast<char>(cp);
        else append_utf8(bytes, cp);
      }
      ++pos_;
      return g_.literal(bytes);
    }
    if (c == '[') {
      ++pos_;
      bool negated = false;
      if (!at_end() && peek() == '^') {
        negated = true;
        ++pos_;
      }
      std::vector<CodepointRange> ranges;
      while (true) {
        if (at_end()) fail("unterminated character class");
        if (peek() == ']') break;
        const uint32_t lo = character();
        uint32_t hi = lo;
        if (pos_ + 1 < s_.size() && peek() == '-' && s_[pos_ + 1] != ']') {
          ++pos_;
          hi = character();
          if (hi < lo) fail("a character range out of order");
        }
        ranges.push_back({lo, hi});
      }
      ++pos_;
      return g_.char_class(std::move(ranges), negated);
    }
    if (c == '.') {
      ++pos_;
      return g_.char_class({{0, kMaxCodepoint}});
    }
    if (c == '(') {
      ++pos_;
      ExprId e = alternatives(depth + 1);
      skip_space();
      if (at_end() || peek() != ')') fail("missing ')'");
      ++pos_;
      return e;
    }
    if (is_name_char(c)) return g_.ref(g_.rule_named(read_name()));
    fail(fmt::format("unexpected character '{}'", c));
  }

  Grammar& g_;
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const GrammarLimits& limits) {
  if (static_cast<int64_t>(text.size()) > limits.max_text_bytes)
    throw GrammarError(limit_message("max_text_bytes", limits.max_text_bytes, "the GBNF text is too long"));
  Grammar g(limits);
  GbnfParser(g, text).parse();
  return g;
}

Grammar choice_grammar(const std::vector<std::string>& choices, const GrammarLimits& limits) {
  if (static_cast<int64_t>(choices.size()) > limits.max_enum_values)
    throw GrammarError(
        limit_message("max_enum_values", limits.max_enum_values, fmt::format("{} choices", choices.size())));
  if (choices.empty()) throw GrammarError("choice needs at least one string");
  Grammar g(limits);
  std::vector<ExprId> options;
  for (const std::string& c : choices) options.push_back(g.literal(c));
  const RuleId root = g.rule_named("root");
  g.define_rule(root, g.choice(std::move(options)));
  g.set_root(root);
  return g;
}

Grammar choice_grammar_from_json(std::string_view json_array, const GrammarLimits& limits) {
  if (static_cast<int64_t>(json_array.size()) > limits.max_text_bytes)
    throw GrammarError(limit_message("max_text_bytes", limits.max_text_bytes, "the choice list is too long"));
  const nlohmann::json j = nlohmann::json::parse(json_array, nullptr, false);
  if (j.is_discarded() || !j.is_array()) throw GrammarError("choice must be a JSON array of strings");
  std::vector<std::string> choices;
  for (const auto& v : j) {
    if (!v.is_string()) throw GrammarError("choice must be a JSON array of strings");
    choices.push_back(v.get<std::string>());
  }
  return choice_grammar(choices, limits);
}

}  // namespace pagedkv::grammar
