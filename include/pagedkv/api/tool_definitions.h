// The tools of a chat request (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`), parsed and
// validated, and the conversion of tool-calling history into what chat templates expect.
//
//   tools:               [{"type": "function", "function": {"name", "description", "parameters"}}]
//                        names: 1-64 of [A-Za-z0-9_-] (OpenAI's rule), unique; parameters: a JSON
//                        Schema object (absent: no arguments).
//   tool_choice:         "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
//                        (default "auto" with tools, "none" without).
//   parallel_tool_calls: false allows one call per answer (forced: the grammar allows one; "auto":
//                        the first call the model wrote is returned, as vLLM does).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagedkv::api {

struct ToolDefinition {
  std::string name;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // a JSON Schema (key order kept)
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  std::vector<ToolDefinition> tools;
  ToolChoice choice = ToolChoice::kNone;
  std::string named;  // kNamed: the function's name (one of `tools`)
  bool parallel_calls = true;  // parallel_tool_calls

  // The model's output is parsed for calls (auto, required, named).
  bool parses_calls() const { return choice != ToolChoice::kNone && !tools.empty(); }
  // The output is constrained to calls (required, named).
  bool forces_calls() const { return choice == ToolChoice::kRequired || choice == ToolChoice::kNamed; }
  // The tools a forced call may name (all for required, the one for named).
  std::vector<ToolDefinition> callable() const;
};

struct ToolLimits {
  size_t max_tools = 128;  // OpenAI's limit
  size_t max_parameters_bytes = 256 * 1024;  // one tool's schema (the grammar layer's text limit)
};

// Reads tools, tool_choice and parallel_tool_calls of a chat request body (already known to be a
// JSON object, parsed keeping key order). ApiError 400 naming the field for anything malformed:
// duplicate or invalid names, a schema that is not an object, tool_choice naming no tool, a
// required call without tools. The schemas' grammars are checked where a call is forced
// (tool_call_parser.h builds them).
ToolRequest parse_tool_request(const nlohmann::ordered_json& body, const ToolLimits& limits = {});

// Checks the tool-calling fields of chat messages (role "tool" with "tool_call_id"; an assistant's
// "tool_calls" with id, type "function", function.name and function.arguments) and rewrites the
// messages as chat templates expect them, as vLLM does: an argument string holding a JSON object
// becomes that object (templates print it with tojson), a null content becomes "", a list of
// text parts one string.
// ApiError 400 (param "messages") for a malformed tool call or tool message.
nlohmann::ordered_json messages_for_template(const nlohmann::ordered_json& messages);

// True when a message list uses tool-calling history (a tool message or an assistant's tool calls).
bool has_tool_history(const nlohmann::ordered_json& messages);

}  // namespace pagedkv::api
