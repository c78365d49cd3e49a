#include "pagedkv/template/value_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/template/limits.h"
#include "pagedkv/template/template_error.h"
#include "pagedkv/template/unicode_text.h"

namespace pagedkv::jinja {

std::string format_python_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  // The shortest round-trip digits and their decimal exponent, then Python's layout rules.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  (void)ec;
  std::string_view sci(buf, static_cast<size_t>(end - buf));  // e.g. "-1.2345e+02"
  const size_t e_at = sci.find('e');
  std::string_view mantissa = sci.substr(0, e_at);
  const int exponent = std::atoi(std::string(sci.substr(e_at + 1)).c_str());
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  std::string out = sign;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    } else {
      const size_t int_len = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_len);
        out += '.';
        out += digits.substr(int_len);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

namespace {

// Python's str.isprintable() for the code points repr() would otherwise escape.
bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F)) return false;
  if (c == 0x1680 || c == 0x180E || c == 0x3000 || c == 0xFEFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  if (c >= 0xFFF9 && c <= 0xFFFB) return false;
  return true;
}

void append_repr_string(std::string& out, std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t c = decode_utf8(s, pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c)) {
      out.append(s.substr(start, pos - start));
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out.push_back(quote);
}

// The containers being printed, outermost first: Python's repr prints a container met again
// inside itself as "[...]" or "{...}" (only a namespace can hold itself; lists and dicts are
// immutable here), and refuses nesting past its recursion limit.
struct ReprPath {
  std::vector<const void*> open;
  size_t max_bytes;  // the text may grow to this (items can be shared: [x, x] doubles per level)
  bool contains(const void* container) const { return std::find(open.begin(), open.end(), container) != open.end(); }
};

void append_repr(std::string& out, const Value& v, ReprPath& path);

void append_container_repr(std::string& out, const Value& v, ReprPath& path) {
  const void* container = v.is_list()   ? static_cast<const void*>(&v.as_list())
                          : v.is_dict() ? static_cast<const void*>(&v.as_dict())
                                        : static_cast<const void*>(&v.as_namespace());
  if (v.is_namespace()) out += "<Namespace ";
  if (path.contains(container)) {
    out += v.is_list() ? (v.as_list().is_tuple ? "(...)" : "[...]") : "{...}";
    if (v.is_namespace()) out += ">";
    return;
  }
  if (path.open.size() >= static_cast<size_t>(kMaxNestedValueDepth))
    throw TemplateRenderError("RecursionError: value nested too deeply to print", 0);
  path.open.push_back(container);
  const auto check_size = [&] {
    if (out.size() > path.max_bytes)
      throw TemplateLimitError(fmt::format("printed value longer than max_output_bytes ({})", path.max_bytes), 0);
  };
  if (v.is_list()) {
    const List& l = v.as_list();
    out.push_back(l.is_tuple ? '(' : '[');
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      append_repr(out, l.items[i], path);
      check_size();
    }
    if (l.is_tuple && l.items.size() == 1) out.push_back(',');
    out.push_back(l.is_tuple ? ')' : ']');
  } else {
    const auto print_entries = [&](const auto& entries) {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, item] : entries) {
        if (!first) out += ", ";
        first = false;
        append_repr_string(out, k);
        out += ": ";
        append_repr(out, item, path);
        check_size();
      }
      out.push_back('}');
    };
    if (v.is_dict()) print_entries(v.as_dict().entries());
    else print_entries(v.as_namespace().attributes);
  }
  if (v.is_namespace()) out += ">";
  path.open.pop_back();
}

void append_repr(std::string& out, const Value& v, ReprPath& path) {
  switch (v.kind()) {
    case Value::Kind::kString:
      append_repr_string(out, v.as_string());
      return;
    case Value::Kind::kUndefined:
      out += "Undefined";
      return;  // repr(), e.g. inside a printed list
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      append_container_repr(out, v, path);
      return;
    default:
      append_python_str(out, v);
  }
}

}  // namespace

void append_python_str(std::string& out, const Value& v, size_t max_bytes) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      out += fmt::format("{}", v.as_int());
      return;
    case Value::Kind::kFloat:
      out += format_python_float(v.as_float());
      return;
    case Value::Kind::kString:
      out += v.as_string();
      return;
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      ReprPath path{{}, max_bytes};
      append_container_repr(out, v, path);
      return;
    }
    case Value::Kind::kCallable:
      out += v.as_callable().describe();
      return;
  }
}

std::string python_str(const Value& v, size_t max_bytes) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_python_str(out, v, max_bytes);
  return out;
}

std::string python_repr(const Value& v, size_t max_bytes) {
  std::string out;
  ReprPath path{{}, max_bytes};
  append_repr(out, v, path);
  return out;
}

namespace {

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t c = decode_utf8(s, pos);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else if (c >= 0x80 && ensure_ascii) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                               static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          }
        } else {
          out.append(s.substr(start, pos - start));
        }
    }
  }
  out.push_back('"');
}

struct JsonWriter {
  const JsonStyle& style;
  size_t max_bytes;
  int line;
  std::string out;

  void newline(int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *style.indent;
  }

  void write(const Value& v, int level) {
    if (out.size() > max_bytes)
      throw TemplateLimitError(fmt::format("line {}: tojson output exceeds max_output_bytes ({})", line, max_bytes),
                               line);
    if (level > 512)
      throw TemplateRenderError(fmt::format("line {}: RecursionError: value nested too deeply for tojson", line), line);
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return;
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out += fmt::format("{}", v.as_int());
        return;
      case Value::Kind::kFloat: {
        const double f = v.as_float();
        if (std::isnan(f)) out += "NaN";
        else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
        else out += format_python_float(f);
        return;
      }
      case Value::Kind::kString:
        append_json_string(out, v.as_string(), style.ensure_ascii);
        return;
      case Value::Kind::kList: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += style.item_separator;
          if (style.indent) newline(level + 1);
          write(items[i], level + 1);
        }
        if (style.indent) newline(level);
        out.push_back(']');
        return;
      }
      case Value::Kind::kDict: {
        const Dict& d = v.as_dict();
        if (d.size() == 0) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<std::string, Value>*> entries;
        entries.reserve(d.size());
        for (const auto& e : d.entries()) entries.push_back(&e);
        if (style.sort_keys)
          std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out.push_back('{');
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += style.item_separator;
          if (style.indent) newline(level + 1);
          append_json_string(out, entries[i]->first, style.ensure_ascii);
          out += style.key_separator;
          write(entries[i]->second, level + 1);
        }
        if (style.indent) newline(level);
        out.push_back('}');
        return;
      }
      default:
        throw TemplateRenderError(
            fmt::format("line {}: TypeError: Object of type {} is not JSON serializable", line, type_name(v)), line);
    }
  }
};

}  // namespace

std::string to_json_text(const Value& v, const JsonStyle& style, size_t max_bytes, int line) {
  JsonWriter writer{style, max_bytes, line, {}};
  writer.write(v, 0);
  if (writer.out.size() > max_bytes)
    throw TemplateLimitError(fmt::format("line {}: tojson output exceeds max_output_bytes ({})", line, max_bytes),
                             line);
  return std::move(writer.out);
}

namespace {

Value from_json(const nlohmann::ordered_json& json, int depth, int max_depth) {
  if (depth > max_depth)
    throw TemplateLimitError(fmt::format("template variables nest deeper than max_data_depth ({})", max_depth), 0);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1, max_depth));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto dict = std::make_shared<Dict>();
      for (const auto& [k, item] : json.items()) dict->set(k, from_json(item, depth + 1, max_depth));
      return Value::dict(std::move(dict));
    }
    default:
      return Value::none();  // binary / discarded: not produced by the JSON parser
  }
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& json, int max_depth) { return from_json(json, 0, max_depth); }

}  // namespace pagedkv::jinja
