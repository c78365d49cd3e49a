// Methods of str, dict and list, and the global functions a chat template may call.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "arg_binding.h"
#include "pagedkv/template/builtins.h"
#include "pagedkv/template/template_error.h"
#include "pagedkv/template/unicode_text.h"
#include "pagedkv/template/value_format.h"

namespace pagedkv::jinja {

namespace {

constexpr std::array<std::string_view, 27> kStringMethods = {
    "strip",   "lstrip",  "rstrip",     "split",   "rsplit",  "startswith", "endswith",   "replace", "upper",
    "lower",   "title",   "capitalize", "find",    "rfind",   "index",      "rindex",     "count",   "join",
    "isdigit", "isalpha", "isalnum",    "isspace", "isupper", "islower",    "splitlines", "format",  "removeprefix"};
constexpr std::array<std::string_view, 1> kMoreStringMethods = {"removesuffix"};
// Dict and list methods; the mutating ones exist (so attribute lookup finds them before items,
// as in Python) but calling them is refused, as jinja2's immutable sandbox refuses it.
constexpr std::array<std::string_view, 11> kDictMethods = {"items",   "keys",   "values",     "get",   "copy",    "pop",
                                                           "popitem", "update", "setdefault", "clear", "fromkeys"};
constexpr std::array<std::string_view, 12> kListMethods = {"index", "count",  "copy",    "append", "extend", "insert",
                                                           "pop",   "remove", "reverse", "sort",   "clear",  "__len__"};

template <size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

class BoundMethod final : public Callable {
 public:
  BoundMethod(Value receiver, std::string name) : receiver_(std::move(receiver)), name_(std::move(name)) {}
  Value call(Renderer& r, CallArgs args, int line) const override {
    return call_method(r, receiver_, name_, std::move(args), line);
  }
  std::string describe() const override {
    return fmt::format("<built-in method {} of {} object>", name_, type_name(receiver_));
  }

 private:
  Value receiver_;
  std::string name_;
};

// Splits on runs of Python whitespace (str.split() with no separator), at most maxsplit times.
std::vector<Value> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<std::string_view> parts;
  std::vector<std::pair<size_t, size_t>> words;  // [begin, end) of each run of non-space
  for (size_t pos = 0; pos < s.size();) {
    size_t next = pos;
    if (is_python_space(decode_utf8(s, next))) {
      pos = next;
      continue;
    }
    const size_t begin = pos;
    while (pos < s.size()) {
      size_t n = pos;
      if (is_python_space(decode_utf8(s, n))) break;
      pos = n;
    }
    words.emplace_back(begin, pos);
  }
  std::vector<Value> out;
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
    for (auto [b, e] : words) out.push_back(Value::string(std::string(s.substr(b, e - b))));
    return out;
  }
  const size_t k = static_cast<size_t>(maxsplit);
  if (!from_right) {
    for (size_t i = 0; i < k; ++i)
      out.push_back(Value::string(std::string(s.substr(words[i].first, words[i].second - words[i].first))));
    out.push_back(Value::string(std::string(python_strip(s.substr(words[k].first), nullptr, false, true))));
  } else {
    const size_t first_kept = words.size() - k;
    out.push_back(
        Value::string(std::string(python_strip(s.substr(0, words[first_kept - 1].second), nullptr, true, false))));
    for (size_t i = first_kept; i < words.size(); ++i)
      out.push_back(Value::string(std::string(s.substr(words[i].first, words[i].second - words[i].first))));
  }
  return out;
}

std::vector<Value> split_on(std::string_view s, std::string_view sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = s.find(sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + sep.size();
    }
    parts.emplace_back(s.substr(start));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep.size()) break;
      const size_t at = s.rfind(sep, end - sep.size());
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(at + sep.size(), end - at - sep.size()));
      end = at;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

// str.format with {} / {0} / {name} fields and no format specs.
std::string python_format(Renderer& r, std::string_view fmt_text, const CallArgs& args, int line) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_text.size(); ++i) {
    const char c = fmt_text[i];
    if (c == '}') {
      if (i + 1 < fmt_text.size() && fmt_text[i + 1] == '}') ++i;
      else r.fail(line, "ValueError: Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt_text.size() && fmt_text[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt_text.find('}', i);
    if (close == std::string_view::npos) r.fail(line, "ValueError: Single '{' encountered in format string");
    const std::string_view field = fmt_text.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string_view::npos)
      r.fail(line, "str.format: format specs are not supported");
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t index = field.empty() ? auto_index++ : std::stoul(std::string(field));
      if (index < args.positional.size()) v = &args.positional[index];
    } else {
      for (const auto& [k, kv] : args.keyword)
        if (k == field) v = &kv;
    }
    if (v == nullptr) r.fail(line, fmt::format("IndexError: format field '{}' has no argument", field));
    append_python_str(out, *v, r.limits().max_output_bytes);
    r.check_size(out.size(), line);
    i = close;
  }
  return out;
}

Value string_method(Renderer& r, const std::string& s, std::string_view name, CallArgs& args, int line) {
  const auto string_arg = [&](const Value& v, std::string_view what) -> const std::string& {
    if (!v.is_string()) r.fail(line, fmt::format("TypeError: {} must be str, not {}", what, type_name(v)));
    return v.as_string();
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto a = bind_args(r, name, args, {"chars"}, line);
    const bool left = name != "rstrip", right = name != "lstrip";
    if (a[0].is_undefined() || a[0].is_none()) return Value::string(std::string(python_strip(s, nullptr, left, right)));
    const std::string_view chars = string_arg(a[0], "strip arg");
    return Value::string(std::string(python_strip(s, &chars, left, right)));
  }
  if (name == "split" || name == "rsplit") {
    auto a = bind_args(r, name, args, {"sep", "maxsplit"}, line);
    const int64_t maxsplit = int_arg(r, a[1], -1, "maxsplit", line);
    if (a[0].is_undefined() || a[0].is_none()) return Value::list(split_whitespace(s, maxsplit, name == "rsplit"));
    const std::string& sep = string_arg(a[0], "separator");
    if (sep.empty()) r.fail(line, "ValueError: empty separator");
    return Value::list(split_on(s, sep, maxsplit, name == "rsplit"));
  }
  if (name == "startswith" || name == "endswith") {
    auto a = bind_args(r, name, args, {"prefix", "start", "end"}, line);
    if (!a[1].is_undefined() || !a[2].is_undefined())
      r.fail(line, fmt::format("str.{}: start/end are not supported", name));
    std::vector<Value> options = a[0].is_list() ? a[0].as_list().items : std::vector<Value>{a[0]};
    for (const Value& o : options) {
      const std::string& p = string_arg(o, name);
      if (name == "startswith" ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                               : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "replace") {
    auto a = bind_args(r, "replace", args, {"old", "new", "count"}, line);
    const std::string& old_text = string_arg(a[0], "replace() argument 1");
    const std::string& new_text = string_arg(a[1], "replace() argument 2");
    int64_t count = int_arg(r, a[2], -1, "count", line);
    std::string out;
    if (old_text.empty()) {  // Python inserts `new` before every code point and at the end
      const auto offsets = code_point_offsets(s);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        if (count != 0) {
          out += new_text;
          --count;
        }
        out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
        r.check_size(out.size(), line);
      }
      if (count != 0) out += new_text;
      return Value::string(std::move(out));
    }
    // Count first, so a result past the output limit fails before it is built.
    size_t occurrences = 0;
    if (old_text.size() == 1 && count < 0) {
      occurrences = static_cast<size_t>(std::count(s.begin(), s.end(), old_text[0]));
    } else {
      for (size_t at = s.find(old_text);
           at != std::string::npos && (count < 0 || static_cast<int64_t>(occurrences) < count);
           at = s.find(old_text, at + old_text.size()))
        ++occurrences;
    }
    const size_t result_size = s.size() - occurrences * old_text.size();
    if (!new_text.empty() &&
        occurrences >
            (r.limits().max_output_bytes - std::min(result_size, r.limits().max_output_bytes)) / new_text.size())
      r.limit_exceeded(line, "max_output_bytes", r.limits().max_output_bytes);
    out.reserve(result_size + occurrences * new_text.size());
    if (old_text.size() == 1 && count < 0) {  // one byte replaced everywhere: a single scan
      for (char c : s) {
        if (c == old_text[0]) out += new_text;
        else out.push_back(c);
      }
      return Value::string(std::move(out));
    }
    size_t start = 0;
    for (size_t n = 0; n < occurrences; ++n) {
      const size_t at = s.find(old_text, start);
      out.append(s, start, at - start);
      out += new_text;
      start = at + old_text.size();
    }
    out.append(s, start);
    return Value::string(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    bind_args(r, name, args, {}, line);
    CallArgs none;
    return apply_filter(r, name, Value::string(s), std::move(none), line);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto a = bind_args(r, name, args, {"sub"}, line);
    const std::string& sub = string_arg(a[0], name);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(code_point_count(s)) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") r.fail(line, "ValueError: substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, at))));
  }
  if (name == "join") {
    auto a = bind_args(r, "join", args, {"iterable"}, line);
    std::string out;
    bool first = true;
    for (const Value& item : r.iterate(a[0], line)->items) {
      if (!first) out += s;
      first = false;
      out += string_arg(item, "sequence item");
      r.check_size(out.size(), line);
    }
    return Value::string(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    bind_args(r, name, args, {}, line);
    if (name == "isupper" || name == "islower") {
      CallArgs none;
      return Value::boolean(
          apply_test(r, name == "isupper" ? "upper" : "lower", Value::string(s), std::move(none), line));
    }
    if (s.empty()) return Value::boolean(false);
    if (name == "isspace") {
      for (size_t pos = 0; pos < s.size();)
        if (!is_python_space(decode_utf8(s, pos))) return Value::boolean(false);
      return Value::boolean(true);
    }
    return Value::boolean(std::all_of(s.begin(), s.end(), [&](char c) {
      const bool digit = c >= '0' && c <= '9';
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      return name == "isdigit" ? digit : (name == "isalpha" ? alpha : digit || alpha);
    }));
  }
  if (name == "splitlines") {
    bind_args(r, name, args, {}, line);
    std::vector<Value> lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(Value::string(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.push_back(Value::string(s.substr(start)));
    return Value::list(std::move(lines));
  }
  if (name == "format") return Value::string(python_format(r, s, args, line));
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = bind_args(r, name, args, {"affix"}, line);
    const std::string& affix = string_arg(a[0], name);
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0 && s.size() >= affix.size())
      return Value::string(s.substr(affix.size()));
    if (name == "removesuffix" && s.size() >= affix.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
      return Value::string(s.substr(0, s.size() - affix.size()));
    return Value::string(s);
  }
  r.fail(line, fmt::format("'str' method '{}' is not supported", name));
}

Value dict_method(Renderer& r, const Value& receiver, std::string_view name, CallArgs& args, int line) {
  const Dict& d = receiver.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    bind_args(r, name, args, {}, line);
    std::vector<Value> out;
    out.reserve(d.size());
    for (const auto& [k, v] : d.entries()) {
      if (name == "items") out.push_back(Value::list({Value::string(k), v}, true));
      else out.push_back(name == "keys" ? Value::string(k) : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    auto a = bind_args(r, "get", args, {"key", "default"}, line);
    if (a[0].is_string())
      if (const Value* v = d.find(a[0].as_string())) return *v;
    return a[1].is_undefined() ? Value::none() : a[1];
  }
  if (name == "copy") {
    bind_args(r, name, args, {}, line);
    return receiver;  // immutable: sharing is copying
  }
  r.fail(line, fmt::format("SecurityError: access to attribute '{}' of 'dict' object is unsafe.", name));
}

Value list_method(Renderer& r, const Value& receiver, std::string_view name, CallArgs& args, int line) {
  const auto& items = receiver.as_list().items;
  if (name == "index" || name == "count") {
    auto a = bind_args(r, name, args, {"value"}, line);
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!values_equal(items[i], a[0])) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") r.fail(line, "ValueError: value is not in list");
    return Value::integer(n);
  }
  if (name == "copy") {
    bind_args(r, name, args, {}, line);
    return receiver;
  }
  r.fail(line,
         fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, type_name(receiver)));
}

// One %-conversion's text with its flags, width and precision applied.
std::string convert_one(Renderer& r, char type, const std::string& flags, int width, int precision, const Value& v,
                        int line) {
  std::string body;
  const auto c_format = [&](const char* length, char conversion) {
    std::string spec = "%" + flags;
    if (width > 0) spec += std::to_string(width);
    if (precision >= 0) spec += "." + std::to_string(precision);
    return spec + length + conversion;
  };
  switch (type) {
    case 's':
    case 'r':
    case 'a': {
      std::string text =
          type == 's' ? python_str(v, r.limits().max_output_bytes) : python_repr(v, r.limits().max_output_bytes);
      if (v.is_undefined() && type != 's') text = "Undefined";
      if (precision >= 0) {
        const auto offsets = code_point_offsets(text);
        if (static_cast<size_t>(precision) + 1 < offsets.size()) text.resize(offsets[static_cast<size_t>(precision)]);
      }
      const size_t len = code_point_count(text);
      if (width > 0 && len < static_cast<size_t>(width)) {
        const std::string pad(static_cast<size_t>(width) - len, ' ');
        text = flags.find('-') != std::string::npos ? text + pad : pad + text;
      }
      return text;
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
    case 'c': {
      if (!v.is_number())
        r.fail(line, fmt::format("TypeError: %{} format: a real number is required, not {}", type, type_name(v)));
      const long long n = v.is_float() ? static_cast<long long>(v.as_float()) : static_cast<long long>(v.as_int());
      if (type == 'c') {
        std::string ch;
        append_utf8(ch, static_cast<char32_t>(n & 0x1FFFFF));
        return ch;
      }
      char buf[128];
      std::snprintf(buf, sizeof buf, c_format("ll", type == 'i' || type == 'u' ? 'd' : type).c_str(), n);
      return buf;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      if (!v.is_number()) r.fail(line, fmt::format("TypeError: must be real number, not {}", type_name(v)));
      char buf[512];
      std::snprintf(buf, sizeof buf, c_format("", type).c_str(), v.as_float());
      return buf;
    }
    default:
      r.fail(line, fmt::format("ValueError: unsupported format character '{}'", type));
  }
}

}  // namespace

Value percent_format(Renderer& r, const std::string& f, const Value& args, int line) {
  std::vector<Value> positional;
  const Dict* mapping = args.is_dict() ? &args.as_dict() : nullptr;
  // Python: a tuple supplies the arguments; anything else is the one argument, and one that is a
  // mapping or a sequence other than str may go unused without error.
  const bool lenient = mapping != nullptr || (args.is_list() && !args.as_list().is_tuple) || args.is_undefined();
  if (args.is_list() && args.as_list().is_tuple) positional = args.as_list().items;
  else positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) r.fail(line, "ValueError: incomplete format");
    std::string key;
    bool keyed = false;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos) r.fail(line, "ValueError: incomplete format key");
      key = f.substr(i + 1, close - i - 1);
      keyed = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ 0#").find(f[i]) != std::string_view::npos) flags.push_back(f[i++]);
    int width = 0, precision = -1;
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') width = std::min(width * 10 + (f[i++] - '0'), 4096);
    if (i < f.size() && f[i] == '.') {
      precision = 0;
      ++i;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') precision = std::min(precision * 10 + (f[i++] - '0'), 4096);
    }
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) r.fail(line, "ValueError: incomplete format");
    if (f[i] == '%') {
      out.push_back('%');
      continue;
    }
    Value v;
    if (keyed) {
      if (mapping == nullptr) r.fail(line, "TypeError: format requires a mapping");
      const Value* found = mapping->find(key);
      if (found == nullptr) r.fail(line, fmt::format("KeyError: '{}'", key));
      v = *found;
    } else {
      if (next >= positional.size()) r.fail(line, "TypeError: not enough arguments for format string");
      v = positional[next++];
    }
    out += convert_one(r, f[i], flags, width, precision, v, line);
    r.check_size(out.size(), line);
  }
  if (!lenient && next < positional.size())
    r.fail(line, "TypeError: not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

namespace {

// ---- globals --------------------------------------------------------------------------------------

class GlobalFunction final : public Callable {
 public:
  using Fn = Value (*)(Renderer&, CallArgs&, int);
  GlobalFunction(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
  Value call(Renderer& r, CallArgs args, int line) const override { return fn_(r, args, line); }
  std::string describe() const override { return fmt::format("<function {}>", name_); }

 private:
  std::string name_;
  Fn fn_;
};

__extension__ using Int128 = __int128;  // range lengths without overflow

Value global_range(Renderer& r, CallArgs& args, int line) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3)
    r.fail(line, "TypeError: range expected 1 to 3 integer arguments");
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (!args.positional[i].is_int() && !args.positional[i].is_bool())
      r.fail(line,
             fmt::format("TypeError: '{}' object cannot be interpreted as an integer", type_name(args.positional[i])));
  }
  if (args.positional.size() == 1) {
    v[1] = args.positional[0].as_int();
  } else {
    v[0] = args.positional[0].as_int();
    v[1] = args.positional[1].as_int();
    if (args.positional.size() == 3) v[2] = args.positional[2].as_int();
  }
  if (v[2] == 0) r.fail(line, "ValueError: range() arg 3 must not be zero");
  const Int128 span = v[2] > 0 ? static_cast<Int128>(v[1]) - v[0] : static_cast<Int128>(v[0]) - v[1];
  const Int128 step = v[2] > 0 ? v[2] : -static_cast<Int128>(v[2]);
  const Int128 count = span <= 0 ? 0 : (span + step - 1) / step;
  // A range is materialised as a list, so its length counts against the loop budget up front.
  if (count > static_cast<Int128>(r.limits().max_loop_iterations))
    r.limit_exceeded(line, "max_loop_iterations", r.limits().max_loop_iterations);
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0, x = v[0]; i < static_cast<int64_t>(count); ++i, x += v[2]) out.push_back(Value::integer(x));
  return Value::list(std::move(out));
}

Value global_namespace(Renderer& r, CallArgs& args, int line) {
  std::vector<std::pair<std::string, Value>> attributes;
  for (const Value& p : args.positional) {
    if (!p.is_dict()) r.fail(line, "TypeError: namespace() takes keyword arguments or a dict");
    for (const auto& [k, v] : p.as_dict().entries()) attributes.emplace_back(k, v);
  }
  for (auto& keyword : args.keyword) {
    const std::string& key = keyword.first;
    auto it = std::find_if(attributes.begin(), attributes.end(), [&](const auto& a) { return a.first == key; });
    if (it != attributes.end()) it->second = std::move(keyword.second);
    else attributes.emplace_back(key, std::move(keyword.second));
  }
  return r.new_namespace(std::move(attributes));
}

Value global_dict(Renderer& r, CallArgs& args, int line) {
  auto d = std::make_shared<Dict>();
  for (const Value& p : args.positional) {
    if (!p.is_dict()) r.fail(line, "TypeError: dict() takes keyword arguments or a dict");
    for (const auto& [k, v] : p.as_dict().entries()) d->set(k, v);
  }
  for (auto& [k, v] : args.keyword) d->set(k, std::move(v));
  return Value::dict(std::move(d));
}

Value global_raise_exception(Renderer& r, CallArgs& args, int line) {
  auto a = bind_args(r, "raise_exception", args, {"message"}, line);
  throw TemplateRaisedError(python_str(a[0], r.limits().max_output_bytes), line);
}

Value global_strftime_now(Renderer& r, CallArgs& args, int line) {
  auto a = bind_args(r, "strftime_now", args, {"format"}, line);
  if (!a[0].is_string()) r.fail(line, "TypeError: strftime_now() needs a format string");
  return Value::string(r.strftime_now(a[0].as_string()));
}

}  // namespace

bool has_method(const Value& receiver, std::string_view name) {
  switch (receiver.kind()) {
    case Value::Kind::kString:
      return listed(kStringMethods, name) || listed(kMoreStringMethods, name);
    case Value::Kind::kDict:
      return listed(kDictMethods, name);
    case Value::Kind::kList:
      return listed(kListMethods, name);
    default:
      return false;
  }
}

Value call_method(Renderer& r, const Value& receiver, std::string_view name, CallArgs args, int line) {
  r.tick(line);
  switch (receiver.kind()) {
    case Value::Kind::kString:
      return string_method(r, receiver.as_string(), name, args, line);
    case Value::Kind::kDict:
      return dict_method(r, receiver, name, args, line);
    case Value::Kind::kList:
      return list_method(r, receiver, name, args, line);
    default:
      r.fail(line, fmt::format("'{}' object has no method '{}'", type_name(receiver), name));
  }
}

Value bound_method(const Value& receiver, std::string_view name) {
  return Value::callable(std::make_shared<BoundMethod>(receiver, std::string(name)));
}

const Value* find_global_function(std::string_view name) {
  static const std::pair<std::string_view, Value> kGlobals[] = {
      {"range", Value::callable(std::make_shared<GlobalFunction>("range", global_range))},
      {"namespace", Value::callable(std::make_shared<GlobalFunction>("namespace", global_namespace))},
      {"dict", Value::callable(std::make_shared<GlobalFunction>("dict", global_dict))},
      {"raise_exception", Value::callable(std::make_shared<GlobalFunction>("raise_exception", global_raise_exception))},
      {"strftime_now", Value::callable(std::make_shared<GlobalFunction>("strftime_now", global_strftime_now))},
  };
  for (const auto& [n, v] : kGlobals)
    if (n == name) return &v;
  return nullptr;
}

}  // namespace pagedkv::jinja
