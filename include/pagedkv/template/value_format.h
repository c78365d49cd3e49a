// Values to text and back, as Python prints them: str() for {{ }} and ~, repr() inside printed
// containers, json.dumps for tojson (transformers' tojson: ensure_ascii=False, optional indent,
// separators, sort_keys), and the input variables from JSON (key order kept).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pagedkv/template/limits.h"
#include "pagedkv/template/value.h"

namespace pagedkv::jinja {

// Python's repr(float): the shortest text that reads back as the same double, in fixed notation
// for exponents -4..15 and scientific ("1e+16", "1e-05") outside; "inf", "nan".
std::string format_python_float(double f);

// Python's str(v); undefined prints as "". A printed container stops with a TemplateLimitError once
// the text passes max_bytes (shared items let a small value print as terabytes).
std::string python_str(const Value& v, size_t max_bytes = RenderLimits{}.max_output_bytes);
void append_python_str(std::string& out, const Value& v, size_t max_bytes = RenderLimits{}.max_output_bytes);

// Python's repr(v), bounded as python_str.
std::string python_repr(const Value& v, size_t max_bytes = RenderLimits{}.max_output_bytes);

// json.dumps's options.
struct JsonStyle {
  std::optional<std::string> indent;  // none: one line; else each level indented by this text
  std::string item_separator = ", ";  // ", " one-line, "," when indented (as json.dumps)
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// json.dumps(v): throws TemplateRenderError for undefined, namespaces and callables (Python's
// "Object of type ... is not JSON serializable") or a result longer than max_bytes.
std::string to_json_text(const Value& v, const JsonStyle& style, size_t max_bytes, int line);

// The value of a JSON document: objects become dicts in document order, arrays lists, integers
// ints (unsigned ones beyond int64 become floats). Throws TemplateLimitError past max_depth.
Value value_from_json(const nlohmann::ordered_json& json, int max_depth);

}  // namespace pagedkv::jinja
