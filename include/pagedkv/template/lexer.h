// Template source to tokens, with jinja2's whitespace rules applied to the text between tags as
// transformers configures them: trim_blocks (the first newline after a block or comment tag is
// dropped), lstrip_blocks (spaces and tabs from the start of a line up to a block or comment tag
// are dropped, unless the tag opens with "+"), "-" on either side of a tag strips all whitespace
// on that side, line endings become "\n" and one final newline is dropped (keep_trailing_newline
// off). {% raw %} ... {% endraw %} comes out as plain text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/template/limits.h"

namespace pagedkv::jinja {

enum class TokenType : uint8_t {
  kText,  // literal output
  kVarBegin,  // {{
  kVarEnd,  // }}
  kBlockBegin,  // {%
  kBlockEnd,  // %}
  kName,  // identifiers and keywords (and, or, not, in, is, if, else, true, none, ...)
  kString,  // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,  // text holds it: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEnd,  // end of the source
};

struct Token {
  TokenType type;
  std::string text;
  int line;
  int64_t integer = 0;
  double number = 0.0;
};

// Throws TemplateSyntaxError (with the line) for an unterminated tag, comment or string, or a
// character no token starts with; TemplateLimitError when the source exceeds max_source_bytes.
std::vector<Token> tokenize(std::string_view source, const ParseLimits& limits);

}  // namespace pagedkv::jinja
