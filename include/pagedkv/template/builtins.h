// What a template can call besides its own macros: jinja2's filters and tests, the methods of
// str, dict and list that templates use (read-only ones: the sandbox is immutable), and the
// documented globals (range, namespace, dict, raise_exception, strftime_now). Each follows Python
// and jinja2 3.1 behaviour, including for undefined inputs.
#pragma once

#include <string_view>

#include "pagedkv/template/renderer.h"
#include "pagedkv/template/value.h"

namespace pagedkv::jinja {

// `input | name(args)`. Unknown filter: TemplateRenderError.
Value apply_filter(Renderer& r, std::string_view name, const Value& input, CallArgs args, int line);

// `input is name(args)`. Unknown test: TemplateRenderError.
bool apply_test(Renderer& r, std::string_view name, const Value& input, CallArgs args, int line);

// Whether receiver.name is a method (str, dict and list methods; attribute lookup finds methods
// before items, so on a dict `d.items` is the method even when the dict has an "items" key).
bool has_method(const Value& receiver, std::string_view name);
Value call_method(Renderer& r, const Value& receiver, std::string_view name, CallArgs args, int line);
// receiver.name as a value (a bound method), for when it is not called at once.
Value bound_method(const Value& receiver, std::string_view name);

// Python's printf-style `format % args` (args: a tuple of values, a dict for %(name)s, or one value).
Value percent_format(Renderer& r, const std::string& format, const Value& args, int line);

// A global function by name, or null.
const Value* find_global_function(std::string_view name);

}  // namespace pagedkv::jinja
