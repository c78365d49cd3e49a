// Tokens to the statement tree, following jinja2's grammar and operator precedence (or < and <
// not < comparisons < + - < ~ < * / // % < ** < unary - + < filters and tests < postfix . [] ()).
// Supported tags: if/elif/else, for (with else, a filtering if, tuple targets), set (plain,
// namespace attribute, tuple and block forms), macro, call, filter, with, generation (transformers'
// tag: renders its body), break and continue. include/import/extends/block are rejected: a chat
// template has no other files to read.
#pragma once

#include <string_view>

#include "pagedkv/template/ast.h"
#include "pagedkv/template/limits.h"

namespace pagedkv::jinja {

// Throws TemplateSyntaxError (with the line) or TemplateLimitError (size, nesting).
ast::Program parse_template(std::string_view source, const ParseLimits& limits);

}  // namespace pagedkv::jinja
