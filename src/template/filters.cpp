// jinja2's filters and tests.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

#include "arg_binding.h"
#include "pagedkv/template/builtins.h"
#include "pagedkv/template/template_error.h"
#include "pagedkv/template/unicode_text.h"
#include "pagedkv/template/value_format.h"

namespace pagedkv::jinja {

namespace {

// str(v), bounded by the render's output limit.
std::string str_of(const Renderer& r, const Value& v) { return python_str(v, r.limits().max_output_bytes); }

// jinja2's attribute getter for map/selectattr/sort/...: a dotted path, each part an item lookup
// first (integers index lists), then an attribute.
Value lookup_path(Renderer& r, const Value& item, std::string_view path, int line) {
  Value v = item;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string_view::npos) dot = path.size();
    const std::string_view part = path.substr(start, dot - start);
    if (v.is_undefined()) r.fail_undefined(line, v);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numeric && v.is_list()) {
      const size_t i = std::strtoull(std::string(part).c_str(), nullptr, 10);
      v = i < v.as_list().items.size() ? v.as_list().items[i] : Value::undefined("index out of range");
    } else if (v.is_dict()) {
      const Value* found = v.as_dict().find(part);
      v = found ? *found
                : (has_method(v, part) ? bound_method(v, part)
                                       : Value::undefined(fmt::format("'dict object' has no attribute '{}'", part)));
    } else if (v.is_namespace()) {
      Value* found = v.as_namespace().find(part);
      v = found ? *found : Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", part));
    } else if ((v.is_string() || v.is_list()) && has_method(v, part)) {
      v = bound_method(v, part);
    } else {
      v = Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(v), part));
    }
    start = dot + 1;
  }
  return v;
}

std::vector<Value> items_of(Renderer& r, const Value& v, int line) { return r.iterate(v, line)->items; }

// A sort / unique / min / max key: the item or its attribute, lower-cased strings unless case-sensitive.
Value sort_key(Renderer& r, const Value& item, const Value& attribute, bool case_sensitive, int line) {
  Value key = attribute.is_string() ? lookup_path(r, item, attribute.as_string(), line) : item;
  if (!case_sensitive && key.is_string()) return Value::string(python_lower(key.as_string()));
  return key;
}

// What a value is as a key of a Python set: equal keys for values Python's == calls equal (1, 1.0
// and True; a string by its text; objects by identity; a tuple by its items' keys), none for a NaN
// or a tuple holding one (equal to nothing, so always kept); lists and dicts are unhashable, a
// TypeError as in Python, also inside a tuple. A tuple's key is as long as its items printed, so
// it is held to max_output_bytes (tuples holding one tuple twice, nested, stand for exponentially
// many items) and tuples to kMaxNestedValueDepth.
std::optional<std::string> python_hash_key(Renderer& r, const Value& v, int line, int depth = 0) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::string("u");
    case Value::Kind::kNone:
      return std::string("n");
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return fmt::format("i{}", v.as_int());
    case Value::Kind::kFloat: {
      const double f = v.as_float();
      if (std::isnan(f)) return std::nullopt;
      if (std::trunc(f) == f && std::fabs(f) < 9.2e18) return fmt::format("i{}", static_cast<int64_t>(f));
      uint64_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      return fmt::format("f{}", bits);
    }
    case Value::Kind::kString:
      return "s" + v.as_string();
    case Value::Kind::kNamespace:
      return fmt::format("p{}", static_cast<const void*>(&v.as_namespace()));
    case Value::Kind::kCallable:
      return fmt::format("p{}", static_cast<const void*>(&v.as_callable()));
    case Value::Kind::kList:
      if (v.as_list().is_tuple) {
        if (depth >= kMaxNestedValueDepth) r.fail(line, "RecursionError: tuple nested too deeply to hash");
        std::string key = "t";
        for (const Value& item : v.as_list().items) {
          const std::optional<std::string> item_key = python_hash_key(r, item, line, depth + 1);
          if (!item_key) return std::nullopt;
          key += fmt::format("{}:", item_key->size());  // lengths keep ('ab', 'c') from ('a', 'bc')
          key += *item_key;
          r.check_size(key.size(), line);
        }
        return key;
      }
      break;
    case Value::Kind::kDict:
      break;
  }
  r.fail(line, fmt::format("TypeError: unhashable type: '{}'", v.is_dict() ? "dict" : "list"));
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// str.splitlines() for the separators Python recognises in text templates produce.
std::vector<std::string> split_lines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.emplace_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

double python_round(double x, int64_t digits) {
  const double scale = std::pow(10.0, static_cast<double>(digits));
  const double scaled = x * scale;
  double rounded = std::nearbyint(scaled);  // ties to even, as Python's round()
  if (std::fabs(scaled - std::trunc(scaled)) != 0.5) rounded = std::round(scaled);
  return rounded / scale;
}

Value filter_tojson(Renderer& r, const Value& input, CallArgs& args, int line) {
  auto a = bind_args(r, "tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, line);
  JsonStyle style;
  style.ensure_ascii = truthy(a[0]);
  if (a[1].is_int()) {
    style.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a[1].as_int(), 0, 1024)), ' ');
  } else if (a[1].is_string()) {
    style.indent = a[1].as_string();
  } else if (!a[1].is_undefined() && !a[1].is_none()) {
    r.fail(line, "TypeError: tojson indent must be an integer or a string");
  }
  if (style.indent) style.item_separator = ",";
  if (a[2].is_list() && a[2].as_list().items.size() == 2 && a[2].as_list().items[0].is_string() &&
      a[2].as_list().items[1].is_string()) {
    style.item_separator = a[2].as_list().items[0].as_string();
    style.key_separator = a[2].as_list().items[1].as_string();
  } else if (!a[2].is_undefined() && !a[2].is_none()) {
    r.fail(line, "TypeError: tojson separators must be a pair of strings");
  }
  style.sort_keys = truthy(a[3]);
  return Value::string(to_json_text(input, style, r.limits().max_output_bytes, line));
}

Value filter_indent(Renderer& r, const Value& input, CallArgs& args, int line) {
  auto a = bind_args(r, "indent", args, {"width", "first", "blank"}, line);
  const std::string indention =
      a[0].is_string()
          ? a[0].as_string()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(r, a[0], 4, "width", line), 0, 1024)), ' ');
  // jinja2 appends a newline to the value itself before splitting lines: only a string can take it.
  if (input.is_undefined()) r.fail_undefined(line, input);
  if (!input.is_string())
    r.fail(line, fmt::format("TypeError: unsupported operand type(s) for +=: '{}' and 'str'", type_name(input)));
  std::string s = input.as_string() + "\n";
  std::vector<std::string> lines = split_lines(s);
  std::string out;
  if (truthy(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (truthy(a[1])) out = indention + out;
  r.check_size(out.size(), line);
  return Value::string(std::move(out));
}

// select / reject / selectattr / rejectattr: keep the items whose (attribute's) test is `keep`.
Value filter_select(Renderer& r, const Value& input, CallArgs& args, bool by_attribute, bool keep, int line) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string())
      r.fail(line, "TypeError: selectattr/rejectattr need an attribute name");
    attribute = args.positional[0].as_string();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) r.fail(line, "TypeError: the test name must be a string");
    test = args.positional[next].as_string();
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next + 1), args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const Value& item : items_of(r, input, line)) {
    r.count_iterations(1, line);
    const Value subject = by_attribute ? lookup_path(r, item, attribute, line) : item;
    const bool passed = test.empty() ? truthy(subject) : apply_test(r, test, subject, test_args, line);
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_map(Renderer& r, const Value& input, CallArgs& args, int line) {
  Value attribute, fallback;
  for (auto& [k, v] : args.keyword) {
    if (k == "attribute") attribute = v;
    else if (k == "default") fallback = v;
  }
  std::vector<Value> out;
  if (attribute.is_string()) {
    for (const Value& item : items_of(r, input, line)) {
      r.count_iterations(1, line);
      Value v = lookup_path(r, item, attribute.as_string(), line);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string())
    r.fail(line, "TypeError: map needs a filter name or attribute=");
  const std::string filter = args.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items_of(r, input, line)) {
    r.count_iterations(1, line);
    out.push_back(apply_filter(r, filter, item, rest, line));
  }
  return Value::list(std::move(out));
}

Value filter_sort(Renderer& r, const Value& input, CallArgs& args, int line) {
  auto a = bind_args(r, "sort", args, {"reverse", "case_sensitive", "attribute"}, line);
  std::vector<Value> items = items_of(r, input, line);
  r.count_iterations(items.size(), line);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(sort_key(r, items[i], a[2], truthy(a[1]), line), i);
  const bool reverse = truthy(a[0]);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    const int c = compare_values(x.first, y.first, line);
    return reverse ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (const auto& [key, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value filter_min_max(Renderer& r, const Value& input, CallArgs& args, bool want_max, int line) {
  auto a = bind_args(r, want_max ? "max" : "min", args, {"case_sensitive", "attribute"}, line);
  std::vector<Value> items = items_of(r, input, line);
  if (items.empty()) return Value::undefined("no first item, sequence was empty");
  size_t best = 0;
  Value best_key = sort_key(r, items[0], a[1], truthy(a[0]), line);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(r, items[i], a[1], truthy(a[0]), line);
    const int c = compare_values(key, best_key, line);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value to_int(Renderer& r, const Value& v, const Value& fallback_arg, const Value& base_arg, int line) {
  const Value fallback = fallback_arg.is_undefined() ? Value::integer(0) : fallback_arg;
  const int64_t base = int_arg(r, base_arg, 10, "base", line);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(f));
  }
  if (v.is_string()) {
    std::string s(python_strip(v.as_string(), nullptr, true, true));
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty() && base >= 2 && base <= 36) {
      errno = 0;
      char* end = nullptr;
      const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
      if (errno == 0 && end == s.c_str() + s.size()) return Value::integer(i);
      const double f = std::strtod(s.c_str(), &end);
      if (end == s.c_str() + s.size() && std::isfinite(f) && std::fabs(f) < 9.2e18)
        return Value::integer(static_cast<int64_t>(f));
    }
  }
  return fallback;
}

}  // namespace

Value apply_filter(Renderer& r, std::string_view name, const Value& input, CallArgs args, int line) {
  const auto no_args = [&]() {
    if (!args.positional.empty() || !args.keyword.empty())
      r.fail(line, fmt::format("TypeError: filter '{}' takes no arguments", name));
  };
  if (name == "tojson") return filter_tojson(r, input, args, line);
  if (name == "trim") {
    auto a = bind_args(r, "trim", args, {"chars"}, line);
    const std::string s = str_of(r, input);
    if (a[0].is_string()) {
      const std::string_view chars = a[0].as_string();
      return Value::string(std::string(python_strip(s, &chars, true, true)));
    }
    return Value::string(std::string(python_strip(s, nullptr, true, true)));
  }
  if (name == "length" || name == "count") {
    no_args();
    switch (input.kind()) {
      case Value::Kind::kString:
        return Value::integer(static_cast<int64_t>(code_point_count(input.as_string())));
      case Value::Kind::kList:
        return Value::integer(static_cast<int64_t>(input.as_list().items.size()));
      case Value::Kind::kDict:
        return Value::integer(static_cast<int64_t>(input.as_dict().size()));
      case Value::Kind::kUndefined:
        return Value::integer(0);
      default:
        r.fail(line, fmt::format("TypeError: object of type '{}' has no len()", type_name(input)));
    }
  }
  if (name == "items") {
    no_args();
    if (input.is_undefined()) return Value::list({});
    if (!input.is_dict()) r.fail(line, "TypeError: Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [k, v] : input.as_dict().entries()) pairs.push_back(Value::list({Value::string(k), v}, true));
    return Value::list(std::move(pairs));
  }
  if (name == "selectattr") return filter_select(r, input, args, true, true, line);
  if (name == "rejectattr") return filter_select(r, input, args, true, false, line);
  if (name == "select") return filter_select(r, input, args, false, true, line);
  if (name == "reject") return filter_select(r, input, args, false, false, line);
  if (name == "map") return filter_map(r, input, args, line);
  if (name == "join") {
    auto a = bind_args(r, "join", args, {"d", "attribute"}, line);
    const std::string sep = a[0].is_undefined() ? std::string() : str_of(r, a[0]);
    std::string out;
    bool first = true;
    for (const Value& item : items_of(r, input, line)) {
      if (!first) out += sep;
      first = false;
      append_python_str(out, a[1].is_string() ? lookup_path(r, item, a[1].as_string(), line) : item,
                        r.limits().max_output_bytes);
      r.check_size(out.size(), line);
    }
    return Value::string(std::move(out));
  }
  if (name == "upper") {
    no_args();
    return Value::string(python_upper(str_of(r, input)));
  }
  if (name == "lower") {
    no_args();
    return Value::string(python_lower(str_of(r, input)));
  }
  if (name == "capitalize" || name == "title") {
    no_args();
    // capitalize: the first code point upper, the rest lower. title (jinja2's): the same for each
    // word, words starting after whitespace, '-', '(', '{', '[' or '<'.
    const std::string s = str_of(r, input);
    std::string out;
    bool word_start = true;
    for (size_t pos = 0; pos < s.size();) {
      const char32_t c = decode_utf8(s, pos);
      const bool boundary =
          name == "title" && (is_python_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<');
      append_utf8(out, boundary ? c : (word_start ? upper_case(c) : lower_case(c)));
      word_start = boundary;
    }
    return Value::string(std::move(out));
  }
  if (name == "replace") {
    CallArgs method_args = std::move(args);
    return call_method(r, Value::string(str_of(r, input)), "replace", std::move(method_args), line);
  }
  if (name == "default" || name == "d") {
    auto a = bind_args(r, "default", args, {"default_value", "boolean"}, line);
    const Value fallback = a[0].is_undefined() ? Value::string("") : a[0];
    if (input.is_undefined() || (truthy(a[1]) && !truthy(input))) return fallback;
    return input;
  }
  if (name == "string") {
    no_args();
    return Value::string(str_of(r, input));
  }
  if (name == "first" || name == "last") {
    no_args();
    std::vector<Value> items = items_of(r, input, line);
    if (items.empty()) return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    no_args();
    return Value::list(items_of(r, input, line));
  }
  if (name == "indent") return filter_indent(r, input, args, line);
  if ((name == "int" || name == "float") && input.is_undefined()) r.fail_undefined(line, input);
  if (name == "int") {
    auto a = bind_args(r, "int", args, {"default", "base"}, line);
    return to_int(r, input, a[0], a[1], line);
  }
  if (name == "float") {
    auto a = bind_args(r, "float", args, {"default"}, line);
    const Value fallback = a[0].is_undefined() ? Value::number(0.0) : a[0];
    if (input.is_number()) return Value::number(input.as_float());
    if (input.is_string()) {
      const std::string s(python_strip(input.as_string(), nullptr, true, true));
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::number(f);
    }
    return fallback;
  }
  if (name == "abs") {
    no_args();
    if (input.is_float()) return Value::number(std::fabs(input.as_float()));
    if (input.is_int() || input.is_bool()) {
      if (input.as_int() == INT64_MIN) r.fail(line, "OverflowError: integer too large");
      return Value::integer(std::llabs(input.as_int()));
    }
    r.fail(line, fmt::format("TypeError: bad operand type for abs(): '{}'", type_name(input)));
  }
  if (name == "round") {
    auto a = bind_args(r, "round", args, {"precision", "method"}, line);
    if (!input.is_number())
      r.fail(line, fmt::format("TypeError: type {} doesn't define __round__ method", type_name(input)));
    const int64_t precision = std::clamp<int64_t>(int_arg(r, a[0], 0, "precision", line), -300, 300);
    const std::string method = a[1].is_string() ? a[1].as_string() : "common";
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (method == "common") {  // Python's round(): an int stays an int
      if (!input.is_float())
        return Value::integer(precision >= 0 ? input.as_int()
                                             : static_cast<int64_t>(python_round(input.as_float(), precision)));
      return Value::number(python_round(input.as_float(), precision));
    }
    if (method == "ceil") return Value::number(std::ceil(input.as_float() * scale) / scale);
    if (method == "floor") return Value::number(std::floor(input.as_float() * scale) / scale);
    r.fail(line, "FilterArgumentError: method must be common, ceil or floor");
  }
  if (name == "unique") {  // jinja2 keeps a set of the keys seen: one hash lookup per item
    auto a = bind_args(r, "unique", args, {"case_sensitive", "attribute"}, line);
    std::vector<Value> out;
    std::unordered_set<std::string> seen;
    for (const Value& item : items_of(r, input, line)) {
      r.count_iterations(1, line);
      const Value key = sort_key(r, item, a[1], truthy(a[0]), line);
      if (const std::optional<std::string> hash_key = python_hash_key(r, key, line))
        if (!seen.insert(*hash_key).second) continue;
      out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "reverse") {
    no_args();
    if (input.is_string()) {
      const std::string& s = input.as_string();
      const auto offsets = code_point_offsets(s);
      std::string out;
      for (size_t i = offsets.size() - 1; i > 0; --i) out.append(s, offsets[i - 1], offsets[i] - offsets[i - 1]);
      return Value::string(std::move(out));
    }
    std::vector<Value> items = items_of(r, input, line);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort") return filter_sort(r, input, args, line);
  if (name == "batch") {
    auto a = bind_args(r, "batch", args, {"linecount", "fill_with"}, line);
    const int64_t size = int_arg(r, a[0], 0, "linecount", line);
    if (size <= 0) r.fail(line, "ValueError: batch size must be positive");
    std::vector<Value> batches, current;
    for (const Value& item : items_of(r, input, line)) {
      current.push_back(item);
      if (static_cast<int64_t>(current.size()) == size)
        batches.push_back(Value::list(std::move(current))), current.clear();
    }
    if (!current.empty()) {
      if (!a[1].is_undefined() && !a[1].is_none())
        while (static_cast<int64_t>(current.size()) < size) current.push_back(a[1]);
      batches.push_back(Value::list(std::move(current)));
    }
    return Value::list(std::move(batches));
  }
  if (name == "min") return filter_min_max(r, input, args, false, line);
  if (name == "max") return filter_min_max(r, input, args, true, line);
  if (name == "sum") {
    auto a = bind_args(r, "sum", args, {"attribute", "start"}, line);
    Value total = a[1].is_undefined() ? Value::integer(0) : a[1];
    for (const Value& item : items_of(r, input, line)) {
      const Value v = a[0].is_string() ? lookup_path(r, item, a[0].as_string(), line) : item;
      if (!v.is_number() || !total.is_number())
        r.fail(line, fmt::format("TypeError: unsupported operand type(s) for +: '{}' and '{}'", type_name(total),
                                 type_name(v)));
      int64_t sum = 0;
      if (total.is_float() || v.is_float()) total = Value::number(total.as_float() + v.as_float());
      else if (__builtin_add_overflow(total.as_int(), v.as_int(), &sum))
        r.fail(line, "OverflowError: integer result too large");
      else total = Value::integer(sum);
    }
    return total;
  }
  if (name == "dictsort") {
    auto a = bind_args(r, "dictsort", args, {"case_sensitive", "by", "reverse"}, line);
    if (!input.is_dict()) r.fail(line, "FilterArgumentError: dictsort needs a mapping");
    const bool by_value = a[1].is_string() && a[1].as_string() == "value";
    std::vector<Value> pairs;
    for (const auto& [k, v] : input.as_dict().entries()) pairs.push_back(Value::list({Value::string(k), v}, true));
    const bool reverse = truthy(a[2]);
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
      const Value kx = sort_key(r, x.as_list().items[by_value ? 1 : 0], Value(), truthy(a[0]), line);
      const Value ky = sort_key(r, y.as_list().items[by_value ? 1 : 0], Value(), truthy(a[0]), line);
      const int c = compare_values(kx, ky, line);
      return reverse ? c > 0 : c < 0;
    });
    return Value::list(std::move(pairs));
  }
  if (name == "wordcount") {
    no_args();
    const std::string s = str_of(r, input);
    int64_t words = 0;
    bool in_word = false;
    for (char c : s) {
      const bool word_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                             static_cast<unsigned char>(c) >= 0x80;
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value::integer(words);
  }
  if (name == "safe") {
    no_args();
    return input.is_undefined() ? Value::string("") : input;
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    no_args();
    return Value::string(html_escape(str_of(r, input)));
  }
  if (name == "attr") {
    auto a = bind_args(r, "attr", args, {"name"}, line);
    if (!a[0].is_string()) r.fail(line, "TypeError: attr needs a name");
    if (input.is_undefined()) r.fail_undefined(line, input);
    if (input.is_namespace()) {
      Value* v = input.as_namespace().find(a[0].as_string());
      return v ? *v : Value::undefined("no such attribute");
    }
    if (has_method(input, a[0].as_string())) return bound_method(input, a[0].as_string());
    return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(input), a[0].as_string()));
  }
  if (name == "center") {
    auto a = bind_args(r, "center", args, {"width"}, line);
    const std::string s = str_of(r, input);
    const int64_t width = std::clamp<int64_t>(int_arg(r, a[0], 80, "width", line), 0, 1 << 20);
    const int64_t len = static_cast<int64_t>(code_point_count(s));
    if (width <= len) return Value::string(s);
    const int64_t total = width - len;
    const int64_t left = total / 2 + (total & width & 1);
    return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(total - left), ' '));
  }
  r.fail(line, fmt::format("TemplateAssertionError: no filter named '{}'", name));
}

bool apply_test(Renderer& r, std::string_view name, const Value& input, CallArgs args, int line) {
  const auto arg = [&]() -> const Value& {
    if (args.positional.size() != 1 || !args.keyword.empty())
      r.fail(line, fmt::format("TypeError: test '{}' takes one argument", name));
    return args.positional[0];
  };
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "boolean") return input.is_bool();
  if (name == "true") return input.is_bool() && input.as_bool();
  if (name == "false") return input.is_bool() && !input.as_bool();
  if (name == "integer") return input.is_int();
  if (name == "float") return input.is_float();
  if (name == "number") return input.is_number();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_dict();
  if (name == "iterable") return input.is_string() || input.is_list() || input.is_dict() || input.is_undefined();
  if (name == "sequence") return input.is_string() || input.is_list() || input.is_dict() || input.is_undefined();
  if (name == "callable") return input.is_callable() || input.is_undefined();  // Undefined defines __call__
  if (name == "escaped") return false;
  if (name == "sameas") {
    const Value& other = arg();
    if (input.is_none() || input.is_bool() || input.is_undefined())
      return values_equal(input, other) && input.kind() == other.kind();
    return input.same_object(other);
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(input, arg());
  if (name == "ne" || name == "!=") return !values_equal(input, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare_values(input, arg(), line) < 0;
  if (name == "le" || name == "<=") return compare_values(input, arg(), line) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_values(input, arg(), line) > 0;
  if (name == "ge" || name == ">=") return compare_values(input, arg(), line) >= 0;
  if (name == "in") {
    const Value& container = arg();
    if (container.is_string())
      return input.is_string() && container.as_string().find(input.as_string()) != std::string::npos;
    if (container.is_dict()) return input.is_string() && container.as_dict().find(input.as_string()) != nullptr;
    for (const Value& v : r.iterate(container, line)->items)
      if (values_equal(v, input)) return true;
    return false;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (input.is_undefined()) r.fail_undefined(line, input);
    if (!input.is_number()) r.fail(line, fmt::format("TypeError: test '{}' needs a number", name));
    if (input.is_float() && name != "divisibleby") {  // Python: value % 2 == 1 (odd), == 0 (even)
      const double m = std::fmod(std::fmod(input.as_float(), 2.0) + 2.0, 2.0);
      return name == "odd" ? m == 1.0 : m == 0.0;
    }
    if (name == "odd") return input.as_int() % 2 != 0;
    if (name == "even") return input.as_int() % 2 == 0;
    const Value& d = arg();
    if (!d.is_number() || d.as_float() == 0.0) r.fail(line, "ZeroDivisionError: divisibleby needs a non-zero number");
    if (input.is_float() || d.is_float()) return std::fmod(input.as_float(), d.as_float()) == 0.0;
    return d.as_int() == -1 || input.as_int() % d.as_int() == 0;
  }
  if (name == "lower" || name == "upper") {  // str.islower() / isupper() of str(value)
    const std::string s = str_of(r, input);
    bool cased = false;
    for (size_t pos = 0; pos < s.size();) {
      const char32_t c = decode_utf8(s, pos);
      if (!is_cased(c)) continue;
      cased = true;
      if (name == "lower" ? lower_case(c) != c : upper_case(c) != c) return false;
    }
    return cased;
  }
  r.fail(line, fmt::format("TemplateAssertionError: no test named '{}'", name));
}

}  // namespace pagedkv::jinja
