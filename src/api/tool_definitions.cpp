#include "pagedkv/api/tool_definitions.h"

#include <set>

#include <fmt/format.h>

#include "pagedkv/api/api_error.h"
#include "pagedkv/api/json_text.h"

namespace pagedkv::api {
namespace {

using nlohmann::ordered_json;

ApiError tool_error(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  return ApiError(400, message, param, code);
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

// A name as an error message shows it: bounded, one line.
std::string shown_name(std::string_view s) {
  std::string out(s.substr(0, 64));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  return out;
}

ToolDefinition parse_tool(const ordered_json& t, size_t index, const ToolLimits& limits) {
  const std::string at = fmt::format("tools[{}]", index);
  if (!t.is_object()) throw tool_error("tools", fmt::format("{} must be an object", at), "invalid_type");
  const auto type = t.find("type");
  if (type == t.end() || !type->is_string() || *type != "function")
    throw tool_error("tools", fmt::format("{}.type must be \"function\" (the only tool type this server runs)", at),
                     "invalid_type");
  const auto fn = t.find("function");
  if (fn == t.end() || !fn->is_object())
    throw tool_error("tools", fmt::format("{}.function must be an object", at), "invalid_type");
  const auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || !valid_name(name->get<std::string>()))
    throw tool_error("tools", fmt::format("{}.function.name must be 1 to 64 letters, digits, '_' or '-'", at));
  ToolDefinition d;
  d.name = name->get<std::string>();
  if (const auto desc = fn->find("description"); desc != fn->end() && !desc->is_null() && !desc->is_string())
    throw tool_error("tools", fmt::format("{}.function.description must be a string", at), "invalid_type");
  if (const auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
    if (!p->is_object())
      throw tool_error("tools", fmt::format("{}.function.parameters must be a JSON Schema object", at), "invalid_type");
    if (p->dump().size() > limits.max_parameters_bytes)
      throw tool_error("tools",
                       fmt::format("{}.function.parameters is larger than {} bytes", at, limits.max_parameters_bytes));
    d.parameters = *p;
  }
  if (const auto s = fn->find("strict"); s != fn->end() && !s->is_null() && !s->is_boolean())
    throw tool_error("tools", fmt::format("{}.function.strict must be a boolean", at), "invalid_type");
  return d;
}

}  // namespace

std::vector<ToolDefinition> ToolRequest::callable() const {
  if (choice != ToolChoice::kNamed) return tools;
  std::vector<ToolDefinition> out;
  for (const ToolDefinition& t : tools)
    if (t.name == named) out.push_back(t);
  return out;
}

ToolRequest parse_tool_request(const ordered_json& body, const ToolLimits& limits) {
  ToolRequest r;
  if (const auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw tool_error("tools", "'tools' must be a list", "invalid_type");
    if (it->size() > limits.max_tools)
      throw tool_error("tools", fmt::format("at most {} tools per request, got {}", limits.max_tools, it->size()));
    std::set<std::string> names;
    for (size_t i = 0; i < it->size(); ++i) {
      r.tools.push_back(parse_tool((*it)[i], i, limits));
      if (!names.insert(r.tools.back().name).second)
        throw tool_error("tools", fmt::format("the tool name '{}' appears more than once", r.tools.back().name));
    }
  }
  r.choice = r.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      const std::string c = it->get<std::string>();
      if (c == "none") r.choice = ToolChoice::kNone;
      else if (c == "auto") r.choice = r.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
      else if (c == "required") r.choice = ToolChoice::kRequired;
      else
        throw tool_error("tool_choice",
                         fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                     "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got \"{}\"",
                                     shown_name(c)));
    } else if (it->is_object()) {
      const auto fn = it->find("function");
      const ordered_json* name = nullptr;
      if (fn != it->end() && fn->is_object())
        if (const auto n = fn->find("name"); n != fn->end() && n->is_string()) name = &*n;
      const auto type = it->find("type");
      if (type == it->end() || *type != "function" || name == nullptr)
        throw tool_error("tool_choice",
                         "a named 'tool_choice' is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                         "invalid_type");
      r.choice = ToolChoice::kNamed;
      r.named = name->get<std::string>();
    } else {
      throw tool_error("tool_choice", "'tool_choice' must be a string or an object", "invalid_type");
    }
  }
  if (r.forces_calls() && r.tools.empty())
    throw tool_error("tool_choice", "'tool_choice' asks for a tool call but the request has no 'tools'",
                     "missing_field");
  if (r.choice == ToolChoice::kNamed && r.callable().empty())
    throw tool_error("tool_choice", fmt::format("'tool_choice' names the function '{}', which is not in 'tools'",
                                                shown_name(r.named)));
  if (const auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean())
      throw tool_error("parallel_tool_calls", "'parallel_tool_calls' must be a boolean", "invalid_type");
    r.parallel_calls = it->get<bool>();
  }
  return r;
}

bool has_tool_history(const ordered_json& messages) {
  if (!messages.is_array()) return false;
  for (const ordered_json& m : messages) {
    if (!m.is_object()) continue;
    if (const auto role = m.find("role"); role != m.end() && *role == "tool") return true;
    if (const auto it = m.find("tool_calls"); it != m.end() && !it->is_null() && !(it->is_array() && it->empty()))
      return true;
  }
  return false;
}

ordered_json messages_for_template(const ordered_json& messages) {
  ordered_json out = messages;
  if (!out.is_array()) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    ordered_json& m = out[i];
    if (!m.is_object()) continue;
    const std::string at = fmt::format("messages[{}]", i);
    const std::string role = m.contains("role") && m["role"].is_string() ? m["role"].get<std::string>() : "";
    if (auto c = m.find("content"); c != m.end() && c->is_null()) *c = "";
    // Text parts reach the template as one string, their texts joined as for the built-in
    // renderings: templates add content to strings ('\n' + message.content), which a list breaks.
    // (parse_messages has already refused parts of any type but text.)
    if (auto c = m.find("content"); c != m.end() && c->is_array()) {
      std::string text;
      for (const ordered_json& part : *c)
        if (part.is_object() && part.contains("text") && part["text"].is_string())
          text += part["text"].get<std::string>();
      *c = std::move(text);
    }
    if (role == "tool") {
      const auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string())
        throw tool_error("messages", fmt::format("{} (role \"tool\") needs a string 'tool_call_id'", at),
                         "missing_field");
    }
    auto calls = m.find("tool_calls");
    if (calls == m.end() || calls->is_null()) continue;
    if (role != "assistant")
      throw tool_error("messages", fmt::format("{}: only assistant messages have 'tool_calls'", at));
    if (!calls->is_array())
      throw tool_error("messages", fmt::format("{}.tool_calls must be a list", at), "invalid_type");
    for (size_t k = 0; k < calls->size(); ++k) {
      ordered_json& call = (*calls)[k];
      const std::string call_at = fmt::format("{}.tool_calls[{}]", at, k);
      if (!call.is_object()) throw tool_error("messages", fmt::format("{} must be an object", call_at), "invalid_type");
      if (const auto id = call.find("id"); id != call.end() && !id->is_string())
        throw tool_error("messages", fmt::format("{}.id must be a string", call_at), "invalid_type");
      if (const auto type = call.find("type"); type != call.end() && *type != "function")
        throw tool_error("messages", fmt::format("{}.type must be \"function\"", call_at), "invalid_type");
      auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
        throw tool_error("messages", fmt::format("{}.function must be an object with a string 'name'", call_at),
                         "invalid_type");
      auto args = fn->find("arguments");
      if (args == fn->end() || args->is_null()) {
        (*fn)["arguments"] = ordered_json::object();
      } else if (args->is_string()) {
        // OpenAI sends the arguments as JSON text; templates print them as an object.
        ordered_json parsed = parse_json_in_order(args->get<std::string>());
        if (parsed.is_object()) *args = std::move(parsed);
      } else if (!args->is_object()) {
        throw tool_error("messages", fmt::format("{}.function.arguments must be a JSON string or an object", call_at),
                         "invalid_type");
      }
    }
  }
  return out;
}

}  // namespace pagedkv::api
