// Binding a builtin's call arguments to its named parameters, as Python does for a def with
// defaults: positional first, then keywords by name. A parameter not given is undefined.
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/template/renderer.h"
#include "pagedkv/template/value.h"

namespace pagedkv::jinja {

inline std::vector<Value> bind_args(Renderer& r, std::string_view function, CallArgs& args,
                                    std::initializer_list<std::string_view> names, int line) {
  std::vector<Value> bound(names.size());
  if (args.positional.size() > names.size())
    r.fail(line, fmt::format("TypeError: {}() takes at most {} argument(s) ({} given)", function, names.size(),
                             args.positional.size()));
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = std::move(args.positional[i]);
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (std::string_view n : names) {
      if (n == key) break;
      ++i;
    }
    if (i == names.size())
      r.fail(line, fmt::format("TypeError: {}() got an unexpected keyword argument '{}'", function, key));
    bound[i] = std::move(value);
  }
  return bound;
}

// An optional integer argument: its value, or `fallback` when not given (undefined or none).
inline int64_t int_arg(Renderer& r, const Value& v, int64_t fallback, std::string_view what, int line) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool())
    r.fail(line, fmt::format("TypeError: {} must be an integer, not '{}'", what, type_name(v)));
  return v.as_int();
}

}  // namespace pagedkv::jinja
