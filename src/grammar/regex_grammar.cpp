// Regex -> Grammar: a recursive-descent parser over the pattern (grammar/grammar_front_ends.h
// says which subset). Each atom becomes a literal or a character class; groups nest expressions.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "pagedkv/grammar/grammar_front_ends.h"
#include "text_scanning.h"

namespace pagedkv::grammar {
namespace {

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view pattern, bool json_string_safe)
      : g_(g), s_(pattern), safe_(json_string_safe) {}

  ExprId parse() {
    ExprId e = alternation(0);
    if (pos_ < s_.size()) fail("unbalanced ')'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError(fmt::format("regex error at offset {}: {}", pos_, what));
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }

  ExprId alternation(int depth) {
    if (depth > g_.limits().max_nesting_depth)
      throw GrammarError(
          limit_message("max_nesting_depth", g_.limits().max_nesting_depth, "regex groups nest too deep"));
    std::vector<ExprId> branches{sequence(depth)};
    while (!at_end() && peek() == '|') {
      ++pos_;
      branches.push_back(sequence(depth));
    }
    return g_.choice(std::move(branches));
  }

  ExprId sequence(int depth) {
    std::vector<ExprId> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '^' && items.empty()) {  // an anchor at the start: fullmatch anchors anyway
        ++pos_;
        continue;
      }
      if (peek() == '$') {
        ++pos_;
        if (!at_end() && peek() != '|' && peek() != ')') fail("'$' is supported only at the end");
        continue;
      }
      ExprId atom_expr = atom(depth);
      items.push_back(quantified(atom_expr));
    }
    return g_.sequence(std::move(items));
  }

  // Reads {m}, {m,}, {m,n}, {,n} at pos_; false (pos_ unchanged) if it is not one (then '{' is a
  // literal, as in Python).
  bool bounds(int32_t& min, int32_t& max) {
    size_t p = pos_ + 1;
    auto number = [&](int64_t& v) {
      size_t start = p;
      v = 0;
      while (p < s_.size() && s_[p] >= '0' && s_[p] <= '9') {
        v = std::min<int64_t>(v * 10 + (s_[p] - '0'), int64_t{1} << 40);
        ++p;
      }
      return p > start;
    };
    int64_t lo = 0, hi = 0;
    const bool has_lo = number(lo);
    if (p < s_.size() && s_[p] == '}') {
      if (!has_lo) return false;
      hi = lo;
    } else if (p < s_.size() && s_[p] == ',') {
      ++p;
      const bool has_hi = number(hi);
      if (!has_lo && !has_hi) return false;
      if (!has_hi) hi = -1;
      if (p >= s_.size() || s_[p] != '}') return false;
    } else {
      return false;
    }
    const int64_t bound = g_.limits().max_repeat_bound;
    if (lo > bound || hi > bound)
      throw GrammarError(limit_message("max_repeat_bound", bound, fmt::format("regex repetition at offset {}", pos_)));
    if (hi >= 0 && hi < lo) fail("repetition bounds out of order");
    min = static_cast<int32_t>(lo);
    max = hi < 0 ? kUnbounded : static_cast<int32_t>(hi);
    pos_ = p + 1;
    return true;
  }

  ExprId quantified(ExprId e) {
    while (!at_end()) {
      int32_t min = 0, max = 0;
      const char c = peek();
      if (c == '*') {
        max = kUnbounded;
        ++pos_;
      } else if (c == '+') {
        min = 1;
        max = kUnbounded;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{' && bounds(min, max)) {
      } else {
        break;
      }
      if (!at_end() && (peek() == '?' || peek() == '+')) ++pos_;  // lazy / possessive: same language
      e = g_.repeat(e, min, max);
    }
    return e;
  }

  ExprId klass(std::vector<CodepointRange> ranges, bool negated) {
    if (negated) ranges = complement(std::move(ranges));
    if (safe_) ranges = json_safe_ranges(ranges);
    if (ranges.size() == 1 && ranges[0].lo == ranges[0].hi) {
      std::string bytes;
      append_utf8(bytes, ranges[0].lo);
      return g_.literal(bytes);
    }
    return g_.char_class(std::move(ranges));
  }

  // An escape after '\' (pos_ at the letter): a class (\d, \w, \s and complements) or one code point.
  std::vector<CodepointRange> escape(bool in_class, bool& negated) {
    negated = false;
    if (at_end()) fail("a trailing backslash");
    const char c = s_[pos_++];
    switch (c) {
      case 'd':
        return {{'0', '9'}};
      case 'D':
        negated = true;
        return {{'0', '9'}};
      case 'w':
        return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      case 'W':
        negated = true;
        return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      case 's':
        return {{'\t', '\r'}, {' ', ' '}};
      case 'S':
        negated = true;
        return {{'\t', '\r'}, {' ', ' '}};
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        return {{0, 0}};
      case 'x': {
        const uint32_t cp = hex_digits(2);
        return {{cp, cp}};
      }
      case 'u': {
        const uint32_t cp = hex_digits(4);
        return {{cp, cp}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        fail("'\\b' (word boundary) is not supported");
      case 'B':
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        fail(fmt::format("the anchor '\\{}' is not supported", c));
      default:
        if (c >= '1' && c <= '9') fail("back-references are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail(fmt::format("unknown escape '\\{}'", c));
        --pos_;
        const uint32_t cp = next_codepoint();
        return {{cp, cp}};
    }
  }

  uint32_t hex_digits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (at_end() || hex_value(peek()) < 0) fail("expected a hex digit");
      v = v * 16 + static_cast<uint32_t>(hex_value(s_[pos_++]));
    }
    return v;
  }

  uint32_t next_codepoint() {
    uint32_t cp = 0;
    if (!decode_utf8(s_, pos_, cp)) fail("invalid UTF-8 in the pattern");
    return cp;
  }

  ExprId bracket() {  // pos_ after '['
    bool negated = false;
    if (!at_end() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodepointRange> ranges;
    bool first = true;
    while (true) {
      if (at_end()) fail("unterminated character class");
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++pos_;
        bool sub_negated = false;
        std::vector<CodepointRange> sub = escape(true, sub_negated);
        if (sub_negated || sub.size() != 1 || sub[0].lo != sub[0].hi) {
          if (sub_negated) sub = complement(sub);
          ranges.insert(ranges.end(), sub.begin(), sub.end());
          continue;
        }
        lo = sub[0].lo;
      } else if (peek() == '[' && pos_ + 1 < s_.size() && s_[pos_ + 1] == ':') {
        fail("POSIX classes [:name:] are not supported");
      } else {
        lo = next_codepoint();
      }
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && peek() == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          bool sub_negated = false;
          std::vector<CodepointRange> sub = escape(true, sub_negated);
          if (sub_negated || sub.size() != 1 || sub[0].lo != sub[0].hi) fail("a class cannot end a range");
          hi = sub[0].lo;
        } else {
          hi = next_codepoint();
        }
        if (hi < lo) fail("a character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    return klass(std::move(ranges), negated);
  }

  ExprId atom(int depth) {
    const char c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (!at_end() && peek() == '?') {
          ++pos_;
          if (!at_end() && peek() == ':') {
            ++pos_;
          } else if (!at_end() && (peek() == 'P' || peek() == '<') &&
                     !(peek() == '<' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '=' || s_[pos_ + 1] == '!'))) {
            if (peek() == 'P') ++pos_;
            if (at_end() || peek() != '<') fail("unsupported group syntax");
            while (!at_end() && peek() != '>') ++pos_;
            if (at_end()) fail("unterminated group name");
            ++pos_;
          } else {
            fail("look-around, flags and other (?...) groups are not supported");
          }
        }
        ExprId e = alternation(depth + 1);
        if (at_end() || peek() != ')') fail("missing ')'");
        ++pos_;
        return e;
      }
      case '[':
        ++pos_;
        return bracket();
      case '.':
        ++pos_;
        return klass({{'\n', '\n'}}, true);
      case '\\': {
        ++pos_;
        bool negated = false;
        std::vector<CodepointRange> r = escape(false, negated);
        return klass(std::move(r), negated);
      }
      case '*':
      case '+':
      case '?':
        fail("a quantifier with nothing to repeat");
      default: {
        const uint32_t cp = next_codepoint();
        return klass({{cp, cp}}, false);
      }
    }
  }

  Grammar& g_;
  std::string_view s_;
  bool safe_;
  size_t pos_ = 0;
};

}  // namespace

ExprId add_regex(Grammar& g, std::string_view pattern, bool json_string_safe) {
  if (static_cast<int64_t>(pattern.size()) > g.limits().max_text_bytes)
    throw GrammarError(limit_message("max_text_bytes", g.limits().max_text_bytes, "the regex is too long"));
  return RegexParser(g, pattern, json_string_safe).parse();
}

Grammar regex_grammar(std::string_view pattern, const GrammarLimits& limits) {
  Grammar g(limits);
  const RuleId root = g.rule_named("root");
  g.define_rule(root, add_regex(g, pattern, false));
  g.set_root(root);
  return g;
}

}  // namespace pagedkv::grammar
