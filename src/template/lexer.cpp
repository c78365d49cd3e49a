#include "pagedkv/template/lexer.h"

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "pagedkv/template/template_error.h"
#include "pagedkv/template/unicode_text.h"

namespace pagedkv::jinja {

namespace {

[[noreturn]] void syntax_error(int line, std::string_view what) {
  throw TemplateSyntaxError(fmt::format("line {}: syntax error: {}", line, what), line);
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Python's regex \s on ASCII text inside tags.
bool is_tag_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// The source as jinja2 reads it: \r\n and \r become \n; one trailing newline is dropped.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The length of the Python-whitespace prefix of s (what regex \s* matches, Unicode included).
size_t leading_space(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!is_python_space(decode_utf8(s, next))) break;
    pos = next;
  }
  return pos;
}

// A string literal's body decoded as Python's "unicode-escape" codec does (jinja2's rule).
std::string decode_string_literal(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n':
        break;  // a line continuation
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        char32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          if (i + k >= body.size() || !is_hex(body[i + k]))
            syntax_error(line, "truncated \\x, \\u or \\U escape in a string");
          cp = cp * 16 + static_cast<char32_t>(std::strtoul(std::string(1, body[i + k]).c_str(), nullptr, 16));
        }
        if (cp > 0x10FFFF) syntax_error(line, "\\U escape beyond U+10FFFF in a string");
        append_utf8(out, cp);
        i += n;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          append_utf8(out, cp);
        } else {
          out.push_back('\\');  // an unknown escape stays as written
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t open = find_tag_open(pos_);
      std::string text = src_.substr(pos_, (open == std::string::npos ? src_.size() : open) - pos_);
      if (open == std::string::npos) {
        emit_text(std::move(text));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[open + 1];
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        text.erase(python_strip(text, nullptr, false, true).size());
      } else if (kind != '{' && modifier != '+') {
        // lstrip_blocks: only whitespace between the line's start and a block or comment tag.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || line_starting_) &&
            leading_space(std::string_view(text).substr(line_start)) == text.size() - line_start)
          text.erase(line_start);
      }
      emit_text(std::move(text));
      pos_ = open + 2;
      if (modifier == '-' || (modifier == '+' && kind != '{')) ++pos_;
      if (kind == '#') lex_comment();
      else if (kind != '%' || !try_raw()) lex_tag(kind == '{');  // try_raw lexes a whole raw block
    }
    tokens_.push_back(Token{TokenType::kEnd, {}, line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos && i + 1 < src_.size(); i = src_.find('{', i + 1)) {
      const char next = src_[i + 1];
      if (next == '{' || next == '%' || next == '#') return i;
    }
    return std::string::npos;
  }

  void emit_text(std::string text) {
    const int start_line = line_;
    for (char c : text)
      if (c == '\n') ++line_;
    if (!text.empty()) tokens_.push_back(Token{TokenType::kText, std::move(text), start_line});
  }

  void advance_to(size_t to) {
    for (size_t i = pos_; i < to; ++i)
      if (src_[i] == '\n') ++line_;
    pos_ = to;
  }

  // After a tag's closing delimiter: "-" strips all whitespace, trim_blocks one newline (block and
  // comment tags, unless closed with "+").
  void after_tag_end(char modifier, bool block_like) {
    const size_t start = pos_;
    if (modifier == '-') {
      advance_to(pos_ + leading_space(std::string_view(src_).substr(pos_)));
    } else if (block_like && modifier != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
    line_starting_ = pos_ > start ? src_[pos_ - 1] == '\n' : false;
  }

  void lex_comment() {
    const int start_line = line_;
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) syntax_error(start_line, "missing end of comment tag");
    const char modifier = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    advance_to(close + 2);
    after_tag_end(modifier, true);
  }

  // {% raw %} ... {% endraw %}: the body is text, not parsed.
  bool try_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_tag_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
    p += 3;
    while (p < src_.size() && is_tag_space(src_[p])) ++p;
    char open_modifier = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) open_modifier = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return false;
    const int start_line = line_;
    advance_to(p + 2);
    after_tag_end(open_modifier, true);
    // Find {%[-+]? endraw [-+]?%}.
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 2)) {
      size_t q = at + 2;
      const char close_before = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : '\0';
      while (q < src_.size() && is_tag_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_tag_space(src_[q])) ++q;
      char close_modifier = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) close_modifier = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string body = src_.substr(pos_, at - pos_);
      if (close_before == '-') body.erase(python_strip(body, nullptr, false, true).size());
      emit_text(std::move(body));
      advance_to(q + 2);
      after_tag_end(close_modifier, true);
      return true;
    }
    syntax_error(start_line, "missing {% endraw %}");
  }

  void lex_tag(bool variable) {
    const int start_line = line_;
    tokens_.push_back(Token{variable ? TokenType::kVarBegin : TokenType::kBlockBegin, {}, line_});
    const std::string_view close = variable ? "}}" : "%}";
    int depth = 0;  // open brackets: "}}" inside a dict literal does not end the tag
    while (true) {
      while (pos_ < src_.size() && is_tag_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) syntax_error(start_line, variable ? "missing '}}'" : "missing '%}'");
      if (depth == 0) {
        char modifier = '\0';
        size_t at = pos_;
        if (src_[at] == '-' || (!variable && src_[at] == '+')) modifier = src_[at++];
        if (src_.compare(at, 2, close) == 0) {
          tokens_.push_back(Token{variable ? TokenType::kVarEnd : TokenType::kBlockEnd, {}, line_});
          advance_to(at + 2);
          after_tag_end(modifier, !variable);
          return;
        }
      }
      lex_token(depth);
    }
  }

  void lex_token(int& depth) {
    const char c = src_[pos_];
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back(Token{TokenType::kName, src_.substr(pos_, end - pos_), line_});
      pos_ = end;
    } else if (is_digit(c)) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      const int start_line = line_;
      size_t end = pos_ + 1;
      while (end < src_.size() && src_[end] != c) end += src_[end] == '\\' ? 2 : 1;
      if (end >= src_.size()) syntax_error(start_line, "unterminated string");
      std::string value = decode_string_literal(std::string_view(src_).substr(pos_ + 1, end - pos_ - 1), start_line);
      tokens_.push_back(Token{TokenType::kString, std::move(value), start_line});
      advance_to(end + 1);
    } else {
      static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      for (std::string_view op : kTwo) {
        if (src_.compare(pos_, 2, op) == 0) {
          tokens_.push_back(Token{TokenType::kOperator, std::string(op), line_});
          pos_ += 2;
          return;
        }
      }
      if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
        syntax_error(line_, fmt::format("unexpected character '{}'", c));
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      tokens_.push_back(Token{TokenType::kOperator, std::string(1, c), line_});
      ++pos_;
    }
  }

  void lex_number() {
    const auto digits = [&](size_t at) {  // \d+(_\d+)*
      size_t end = at;
      while (end < src_.size() && (is_digit(src_[end]) ||
                                   (src_[end] == '_' && end + 1 < src_.size() && is_digit(src_[end + 1]) && end > at)))
        ++end;
      return end;
    };
    size_t end = digits(pos_);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
      if (exp < src_.size() && is_digit(src_[exp])) {
        end = digits(exp);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    Token token{is_float ? TokenType::kFloat : TokenType::kInteger, text, line_};
    errno = 0;
    if (is_float) {
      token.number = std::strtod(text.c_str(), nullptr);
    } else {
      token.integer = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) syntax_error(line_, "integer literal out of range");
    }
    tokens_.push_back(std::move(token));
    pos_ = end;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the last tag's end consumed a newline (or we are at the start)
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes)
    throw TemplateLimitError(fmt::format("template source of {} bytes exceeds max_source_bytes ({})", source.size(),
                                         limits.max_source_bytes),
                             0);
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace pagedkv::jinja
