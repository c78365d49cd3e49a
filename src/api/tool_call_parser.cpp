#include "pagedkv/api/tool_call_parser.h"

#include <optional>

#include <fmt/format.h>

#include "pagedkv/api/api_error.h"
#include "pagedkv/api/json_text.h"
#include "pagedkv/core/error.h"
#include "pagedkv/grammar/grammar_limits.h"
#include "pagedkv/grammar/json_schema_grammar.h"

namespace pagedkv::api {
namespace {

using nlohmann::ordered_json;
using Kind = ToolCallScan::Kind;

ToolCallScan text_until(size_t end) { return {Kind::kText, end, {}}; }
ToolCallScan need_more() { return {Kind::kNeedMore, 0, {}}; }
ToolCallScan calls_until(size_t end, std::vector<ToolCall> c) { return {Kind::kCalls, end, std::move(c)}; }

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// Where a possible start of `tag` begins at the end of `s` (a proper prefix of the tag as a
// suffix of s): that text must wait. npos when none.
size_t partial_tag_start(std::string_view s, std::string_view tag) {
  const size_t longest = std::min(s.size(), tag.size() - 1);
  for (size_t n = longest; n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return s.size() - n;
  return std::string_view::npos;
}

std::optional<ordered_json> parse_json(std::string_view s) {
  ordered_json j = parse_json_in_order(s);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// A call object {"name": "...", "<args key>": {...} or "{...}"}; nullopt when it is not one.
std::optional<ToolCall> call_from_object(const ordered_json& o, std::initializer_list<const char*> argument_keys) {
  if (!o.is_object()) return std::nullopt;
  const auto name = o.find("name");
  if (name == o.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ordered_json args = ordered_json::object();
  for (const char* key : argument_keys) {
    const auto a = o.find(key);
    if (a == o.end()) continue;
    if (a->is_string()) {  // some models write the arguments as JSON text
      std::optional<ordered_json> parsed = parse_json(a->get<std::string>());
      if (!parsed || !parsed->is_object()) return std::nullopt;
      args = std::move(*parsed);
    } else if (a->is_object()) {
      args = *a;
    } else if (!a->is_null()) {
      return std::nullopt;
    }
    break;
  }
  ToolCall c;
  c.name = name->get<std::string>();
  c.arguments = args.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  return c;
}

// The text as one call object, white space around it allowed.
std::optional<ToolCall> call_from_text(std::string_view s, std::initializer_list<const char*> argument_keys) {
  const size_t start = skip_space(s, 0);
  if (start == s.size() || s[start] != '{') return std::nullopt;
  size_t end = 0;
  if (json_container_span(s.substr(start), end) != JsonSpan::kComplete) return std::nullopt;
  if (skip_space(s, start + end) != s.size()) return std::nullopt;
  std::optional<ordered_json> j = parse_json(s.substr(start, end));
  if (!j) return std::nullopt;
  return call_from_object(*j, argument_keys);
}

// A JSON array of call objects.
std::optional<std::vector<ToolCall>> calls_from_array(std::string_view s,
                                                      std::initializer_list<const char*> argument_keys) {
  std::optional<ordered_json> j = parse_json(s);
  if (!j || !j->is_array() || j->empty()) return std::nullopt;
  std::vector<ToolCall> out;
  for (const ordered_json& o : *j) {
    std::optional<ToolCall> c = call_from_object(o, argument_keys);
    if (!c) return std::nullopt;
    out.push_back(std::move(*c));
  }
  return out;
}

std::string random_alnum(std::mt19937_64& random, int n) {
  static constexpr std::string_view kChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (int i = 0; i < n; ++i) s += kChars[random() % kChars.size()];
  return s;
}

// ---- forced calls: a JSON Schema of the call object, wrapped in the syntax's markup ------------

// {"name": <const>, "<args key>": <parameters>} for each tool (anyOf when several). The
// parameters' $defs / definitions move to the root, where their "#/$defs/..." references point.
ordered_json call_schema(std::span<const ToolDefinition> tools, const char* args_key) {
  ordered_json root = ordered_json::object();
  ordered_json alternatives = ordered_json::array();
  for (const ToolDefinition& t : tools) {
    ordered_json params = t.parameters;
    for (const char* defs : {"$defs", "definitions"}) {
      const auto it = params.find(defs);
      if (it == params.end()) continue;
      if (!it->is_object())
        throw ApiError(400, fmt::format("tool '{}': '{}' must be an object", t.name, defs), "tools", "invalid_grammar");
      for (const auto& [k, v] : it->items()) {
        if (root.contains(defs) && root[defs].contains(k) && root[defs][k] != v)
          throw ApiError(400,
                         fmt::format("tools define '{}/{}' differently; a forced call needs one definition", defs, k),
                         "tools", "invalid_grammar");
        root[defs][k] = v;
      }
      params.erase(defs);
    }
    if (params.empty()) params = {{"type", "object"}, {"properties", ordered_json::object()}};
    ordered_json properties = ordered_json::object();
    properties["name"] = {{"const", t.name}};
    properties[args_key] = std::move(params);
    ordered_json call = ordered_json::object();
    call["type"] = "object";
    call["properties"] = std::move(properties);
    call["required"] = ordered_json::array({"name", args_key});
    alternatives.push_back(std::move(call));
  }
  if (alternatives.size() == 1) {
    for (auto& [k, v] : alternatives[0].items()) root[k] = v;
  } else {
    root["anyOf"] = std::move(alternatives);
  }
  return root;
}

// The grammar of `schema`, its root rule rewritten by `wrap` (given a reference to one call).
template <typename Wrap>
std::string wrapped_call_grammar(const ordered_json& schema, Wrap wrap) {
  try {
    grammar::Grammar g = grammar::json_schema_grammar(schema.dump(), {}, {});
    const grammar::RuleId root = g.root();
    const grammar::RuleId call = g.add_rule("tool-call");
    g.define_rule(call, g.rule(root).body);
    g.define_rule(root, wrap(g, g.ref(call)));
    return g.to_gbnf();
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, fmt::format("a tool's parameters cannot constrain a forced call: {}", e.what()), "tools",
                   "invalid_grammar");
  }
}

// One or more of `one`, separated by `separator` when parallel.
grammar::ExprId calls_expr(grammar::Grammar& g, grammar::ExprId one, std::string_view separator, bool parallel) {
  if (!parallel) return one;
  return g.sequence({one, g.repeat(g.sequence({g.literal(separator), one}), 0, grammar::kUnbounded)});
}

// ---- the syntaxes ------------------------------------------------------------------------------

class HermesParser final : public ToolCallParser {
 public:
  std::string_view name() const override { return "hermes"; }

  ToolCallScan scan(std::string_view rest, bool, bool at_end) const override {
    static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
    const size_t open = rest.find(kOpen);
    if (open == std::string_view::npos) {
      if (at_end) return text_until(rest.size());
      const size_t partial = partial_tag_start(rest, kOpen);
      if (partial == std::string_view::npos) return text_until(rest.size());
      return partial > 0 ? text_until(partial) : need_more();
    }
    if (open > 0) return text_until(open);
    const size_t close = rest.find(kClose, kOpen.size());
    if (close == std::string_view::npos) {
      if (!at_end) return need_more();
      // The output ended inside the block (no closing tag): still a call if the rest is one.
      if (std::optional<ToolCall> c = call_from_text(rest.substr(kOpen.size()), {"arguments", "parameters"}))
        return calls_until(rest.size(), {std::move(*c)});
      return text_until(kOpen.size());
    }
    const size_t end = close + kClose.size();
    if (std::optional<ToolCall> c =
            call_from_text(rest.substr(kOpen.size(), close - kOpen.size()), {"arguments", "parameters"}))
      return calls_until(end, {std::move(*c)});
    return text_until(end);
  }

  std::string forced_call_grammar(std::span<const ToolDefinition> tools, bool parallel) const override {
    return wrapped_call_grammar(call_schema(tools, "arguments"), [parallel](grammar::Grammar& g, grammar::ExprId call) {
      const grammar::ExprId one = g.sequence({g.literal("<tool_call>\n"), call, g.literal("\n</tool_call>")});
      return calls_expr(g, one, "\n", parallel);
    });
  }
};

class Llama3JsonParser final : public ToolCallParser {
 public:
  std::string_view name() const override { return "llama3_json"; }

  ToolCallScan scan(std::string_view rest, bool at_output_start, bool at_end) const override {
    static constexpr std::string_view kTag = "<|python_tag|>";
    if (!at_output_start) return text_until(rest.size());  // calls are the whole output
    const size_t start = skip_space(rest, 0);
    if (start == rest.size()) return at_end ? text_until(rest.size()) : need_more();
    const std::string_view tail = rest.substr(start);
    const bool tagged = tail.starts_with(kTag);
    if (!tagged && tail[0] != '{') {
      if (!at_end && kTag.starts_with(tail)) return need_more();
      return text_until(rest.size());
    }
    if (!at_end) return need_more();
    std::vector<ToolCall> out;
    size_t i = tagged ? kTag.size() : 0;
    while (true) {
      i = skip_space(tail, i);
      size_t end = 0;
      if (i >= tail.size() || tail[i] != '{' || json_container_span(tail.substr(i), end) != JsonSpan::kComplete)
        return text_until(rest.size());
      std::optional<ordered_json> j = parse_json(tail.substr(i, end));
      std::optional<ToolCall> c = j ? call_from_object(*j, {"parameters", "arguments"}) : std::nullopt;
      if (!c) return text_until(rest.size());
      out.push_back(std::move(*c));
      i = skip_space(tail, i + end);
      if (i == tail.size()) break;
      if (tail[i] != ';') return text_until(rest.size());
      ++i;
    }
    return calls_until(rest.size(), std::move(out));
  }

  std::string forced_call_grammar(std::span<const ToolDefinition> tools, bool parallel) const override {
    return wrapped_call_grammar(
        call_schema(tools, "parameters"),
        [parallel](grammar::Grammar& g, grammar::ExprId call) { return calls_expr(g, call, "; ", parallel); });
  }
};

// A tag followed by a JSON array of call objects: Mistral's [TOOL_CALLS][...] (and its newer
// [TOOL_CALLS]name[ARGS]{...}), Granite's <|tool_call|>[...].
class TaggedArrayParser final : public ToolCallParser {
 public:
  TaggedArrayParser(std::string_view name, std::string_view tag, bool mistral)
      : name_(name), tag_(tag), mistral_(mistral) {}

  std::string_view name() const override { return name_; }

  ToolCallScan scan(std::string_view rest, bool at_output_start, bool at_end) const override {
    const size_t open = rest.find(tag_);
    if (open == std::string_view::npos) {
      // A vocabulary's control token may be left out of the decoded text: an output that is
      // nothing but the array of calls is read as calls too (decided at the end).
      if (at_output_start) {
        const size_t start = skip_space(rest, 0);
        if (start == rest.size() && !at_end) return need_more();
        if (start < rest.size() && rest[start] == '[') {
          if (!at_end) return need_more();
          if (std::optional<std::vector<ToolCall>> c = array_at(rest, start, true))
            return calls_until(rest.size(), std::move(*c));
        }
      }
      if (at_end) return text_until(rest.size());
      const size_t partial = partial_tag_start(rest, tag_);
      if (partial == std::string_view::npos) return text_until(rest.size());
      return partial > 0 ? text_until(partial) : need_more();
    }
    if (open > 0) return text_until(open);
    const size_t i = skip_space(rest, tag_.size());
    if (i == rest.size()) return at_end ? text_until(tag_.size()) : need_more();
    if (rest[i] == '[') {
      size_t end = 0;
      switch (json_container_span(rest.substr(i), end)) {
        case JsonSpan::kIncomplete:
          return at_end ? complete_calls_of_cut_list(rest, i) : need_more();
        case JsonSpan::kInvalid:
          return text_until(tag_.size());
        case JsonSpan::kComplete:
          break;
      }
      if (std::optional<std::vector<ToolCall>> c = calls_from_array(rest.substr(i, end), {"arguments", "parameters"}))
        return calls_until(i + end, std::move(*c));
      return text_until(tag_.size());
    }
    if (!mistral_) return text_until(tag_.size());
    return scan_named(rest, i, at_end);
  }

  std::string forced_call_grammar(std::span<const ToolDefinition> tools, bool parallel) const override {
    const std::string open = std::string(tag_) + "[";
    return wrapped_call_grammar(call_schema(tools, "arguments"), [&](grammar::Grammar& g, grammar::ExprId call) {
      return g.sequence({g.literal(open), calls_expr(g, call, ",", parallel), g.literal("]")});
    });
  }

  std::string new_call_id(std::mt19937_64& random) const override {
    return mistral_ ? random_alnum(random, 9) : ToolCallParser::new_call_id(random);
  }

 private:
  std::optional<std::vector<ToolCall>> array_at(std::string_view rest, size_t start, bool whole) const {
    size_t end = 0;
    if (json_container_span(rest.substr(start), end) != JsonSpan::kComplete) return std::nullopt;
    if (whole && skip_space(rest, start + end) != rest.size()) return std::nullopt;
    return calls_from_array(rest.substr(start, end), {"arguments", "parameters"});
  }

  // The output ended inside the list starting at `i` (max_tokens): its complete calls are calls,
  // the rest text.
  ToolCallScan complete_calls_of_cut_list(std::string_view rest, size_t i) const {
    std::vector<ToolCall> out;
    size_t used = 0;
    for (size_t k = skip_space(rest, i + 1); k < rest.size() && rest[k] == '{';) {
      size_t end = 0;
      if (json_container_span(rest.substr(k), end) != JsonSpan::kComplete) break;
      std::optional<ordered_json> j = parse_json(rest.substr(k, end));
      std::optional<ToolCall> c = j ? call_from_object(*j, {"arguments", "parameters"}) : std::nullopt;
      if (!c) break;
      out.push_back(std::move(*c));
      used = k + end;
      k = skip_space(rest, used);
      if (k >= rest.size() || rest[k] != ',') break;
      k = skip_space(rest, k + 1);
    }
    return out.empty() ? text_until(tag_.size()) : calls_until(used, std::move(out));
  }

  // [TOOL_CALLS]name[ARGS]{...} or [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}, the name at `i`.
  ToolCallScan scan_named(std::string_view rest, size_t i, bool at_end) const {
    static constexpr std::string_view kArgs = "[ARGS]", kCallId = "[CALL_ID]";
    const auto name_char = [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
             c == '.';
    };
    size_t k = i;
    while (k < rest.size() && name_char(rest[k]) && k - i <= 64) ++k;
    if (k == i || k - i > 64) return text_until(tag_.size());
    if (k == rest.size()) return at_end ? text_until(tag_.size()) : need_more();
    const std::string_view after = rest.substr(k);
    size_t args = std::string_view::npos;
    if (after.starts_with(kArgs)) {
      args = k + kArgs.size();
    } else if (after.starts_with(kCallId)) {
      const size_t found = rest.find(kArgs, k + kCallId.size());
      if (found == std::string_view::npos || found - (k + kCallId.size()) > 64) {
        const bool may_come =
            found == std::string_view::npos && rest.size() - (k + kCallId.size()) <= 64 + kArgs.size();
        return !at_end && may_come ? need_more() : text_until(tag_.size());
      }
      args = found + kArgs.size();
    } else {
      const bool partial = kArgs.starts_with(after) || kCallId.starts_with(after);
      return !at_end && partial ? need_more() : text_until(tag_.size());
    }
    const size_t a = skip_space(rest, args);
    if (a == rest.size()) return at_end ? text_until(tag_.size()) : need_more();
    if (rest[a] != '{') return text_until(tag_.size());
    size_t end = 0;
    switch (json_container_span(rest.substr(a), end)) {
      case JsonSpan::kIncomplete:
        return at_end ? text_until(tag_.size()) : need_more();
      case JsonSpan::kInvalid:
        return text_until(tag_.size());
      case JsonSpan::kComplete:
        break;
    }
    std::optional<ordered_json> j = parse_json(rest.substr(a, end));
    if (!j || !j->is_object()) return text_until(tag_.size());
    ToolCall c;
    c.name = std::string(rest.substr(i, k - i));
    c.arguments = j->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    return calls_until(a + end, {std::move(c)});
  }

  std::string_view name_, tag_;
  bool mistral_;
};

// DeepSeek V3 / R1: the calls in one block of the vocabulary's markers,
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>
//   (\n and more calls)<｜tool▁calls▁end｜>
class DeepSeekParser final : public ToolCallParser {
 public:
  static constexpr std::string_view kBlockOpen = "<｜tool▁calls▁begin｜>", kBlockClose = "<｜tool▁calls▁end｜>";
  static constexpr std::string_view kCallOpen = "<｜tool▁call▁begin｜>", kCallClose = "<｜tool▁call▁end｜>";
  static constexpr std::string_view kSep = "<｜tool▁sep｜>";

  std::string_view name() const override { return "deepseek_v3"; }

  ToolCallScan scan(std::string_view rest, bool, bool at_end) const override {
    const size_t open = rest.find(kBlockOpen);
    if (open == std::string_view::npos) {
      if (at_end) return text_until(rest.size());
      const size_t partial = partial_tag_start(rest, kBlockOpen);
      if (partial == std::string_view::npos) return text_until(rest.size());
      return partial > 0 ? text_until(partial) : need_more();
    }
    if (open > 0) return text_until(open);
    const size_t close = rest.find(kBlockClose, kBlockOpen.size());
    if (close == std::string_view::npos) {
      if (!at_end) return need_more();
      // The output ended inside the block (max_tokens): its complete calls are calls, the rest text.
      size_t used = 0;
      std::optional<std::vector<ToolCall>> c = calls_in(rest.substr(kBlockOpen.size()), &used);
      return c ? calls_until(kBlockOpen.size() + used, std::move(*c)) : text_until(kBlockOpen.size());
    }
    const size_t end = close + kBlockClose.size();
    if (std::optional<std::vector<ToolCall>> c = calls_in(rest.substr(kBlockOpen.size(), close - kBlockOpen.size())))
      return calls_until(end, std::move(*c));
    return text_until(end);
  }

  std::string forced_call_grammar(std::span<const ToolDefinition> tools, bool parallel) const override {
    // The name is outside the JSON: each tool's arguments grammar follows its own name.
    try {
      grammar::Grammar g;
      std::vector<grammar::ExprId> alternatives;
      for (size_t i = 0; i < tools.size(); ++i) {
        ordered_json params = tools[i].parameters;
        if (params.empty()) params = {{"type", "object"}, {"properties", ordered_json::object()}};
        const grammar::Grammar args = grammar::json_schema_grammar(params.dump(), {}, {});
        const grammar::RuleId root = g.import_grammar(args, fmt::format("t{}-", i));
        alternatives.push_back(
            g.sequence({g.literal(fmt::format("{}function{}{}\n```json\n", kCallOpen, kSep, tools[i].name)),
                        g.ref(root), g.literal(fmt::format("\n```{}", kCallClose))}));
      }
      const grammar::ExprId call = g.choice(std::move(alternatives));
      const grammar::RuleId root = g.rule_named("root");
      g.define_rule(root,
                    g.sequence({g.literal(kBlockOpen), calls_expr(g, call, "\n", parallel), g.literal(kBlockClose)}));
      g.set_root(root);
      return g.to_gbnf();
    } catch (const grammar::GrammarError& e) {
      throw ApiError(400, fmt::format("a tool's parameters cannot constrain a forced call: {}", e.what()), "tools",
                     "invalid_grammar");
    }
  }

 private:
  // The calls between the block's markers (white space between calls allowed). With `used`, the
  // block may end in an incomplete call: the complete ones before it are returned and `used` says
  // where they end.
  static std::optional<std::vector<ToolCall>> calls_in(std::string_view block, size_t* used = nullptr) {
    static constexpr std::string_view kFence = "```json", kFenceEnd = "```";
    std::vector<ToolCall> out;
    size_t i = skip_space(block, 0);
    while (i < block.size()) {
      if (block.substr(i, kCallOpen.size()) != kCallOpen) break;
      const size_t close = block.find(kCallClose, i);
      if (close == std::string_view::npos) break;
      std::string_view call = block.substr(i + kCallOpen.size(), close - i - kCallOpen.size());
      const size_t sep = call.find(kSep);
      if (sep == std::string_view::npos) return std::nullopt;  // the type before it ("function") is not checked
      call.remove_prefix(sep + kSep.size());
      const size_t newline = call.find('\n');
      if (newline == std::string_view::npos || newline == 0) return std::nullopt;
      ToolCall c;
      c.name = std::string(call.substr(0, newline));
      const auto trim = [](std::string_view t) {
        t.remove_prefix(skip_space(t, 0));
        while (!t.empty() && is_space(t.back())) t.remove_suffix(1);
        return t;
      };
      std::string_view args = trim(call.substr(newline + 1));
      if (args.starts_with(kFence) && args.ends_with(kFenceEnd) && args.size() >= kFence.size() + kFenceEnd.size())
        args = trim(args.substr(kFence.size(), args.size() - kFence.size() - kFenceEnd.size()));
      size_t end = 0;
      if (args.empty() || args[0] != '{' || json_container_span(args, end) != JsonSpan::kComplete || end != args.size())
        return std::nullopt;
      std::optional<ordered_json> parsed = parse_json(args);
      if (!parsed || !parsed->is_object() || c.name.find_first_of(" \t\r<>") != std::string::npos) return std::nullopt;
      c.arguments = parsed->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
      out.push_back(std::move(c));
      if (used != nullptr) *used = close + kCallClose.size();
      i = skip_space(block, close + kCallClose.size());
    }
    if (out.empty() || (used == nullptr && i < block.size())) return std::nullopt;
    return out;
  }
};

}  // namespace

std::string ToolCallParser::new_call_id(std::mt19937_64& random) const { return "call_" + random_alnum(random, 24); }

JsonSpan json_container_span(std::string_view s, size_t& end) {
  if (s.empty() || (s[0] != '{' && s[0] != '[')) return JsonSpan::kInvalid;
  std::string open;  // the brackets not closed yet
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (static_cast<int>(open.size()) >= kMaxJsonDepth) return JsonSpan::kInvalid;
      open += c;
    } else if (c == '}' || c == ']') {
      if (open.empty() || open.back() != (c == '}' ? '{' : '[')) return JsonSpan::kInvalid;
      open.pop_back();
      if (open.empty()) {
        end = i + 1;
        return JsonSpan::kComplete;
      }
    }
  }
  return JsonSpan::kIncomplete;
}

std::shared_ptr<const ToolCallParser> make_tool_call_parser(std::string_view name) {
  if (name == "none") return nullptr;
  if (name == "hermes") return std::make_shared<HermesParser>();
  if (name == "llama3_json") return std::make_shared<Llama3JsonParser>();
  if (name == "mistral") return std::make_shared<TaggedArrayParser>("mistral", "[TOOL_CALLS]", true);
  if (name == "granite") return std::make_shared<TaggedArrayParser>("granite", "<|tool_call|>", false);
  if (name == "deepseek_v3") return std::make_shared<DeepSeekParser>();
  throw ConfigError(fmt::format("unknown tool-call parser '{}' (known: {})", name, tool_call_parser_names()));
}

std::string_view tool_call_parser_names() { return "auto, hermes, llama3_json, mistral, granite, deepseek_v3, none"; }

std::string_view detect_tool_call_syntax(std::string_view source) {
  const auto has = [source](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has("<tool_call>")) return "hermes";
  if (has("[TOOL_CALLS]")) return "mistral";
  if (has("<|tool_call|>")) return "granite";
  if (has("<｜tool▁calls▁begin｜>")) return "deepseek_v3";
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("\"parameters\""))) return "llama3_json";
  return "";
}

}  // namespace pagedkv::api
