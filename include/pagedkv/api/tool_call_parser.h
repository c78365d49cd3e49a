// Tool-call syntaxes of model families: how a model writes a call, how pagedkv reads it back out of
// the generated text, and the grammar that forces one (tool_choice "required" or a named tool).
//
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Qwen2.5, Qwen3,
//                Hermes, SmolLM3: the templates that print <tool_call>); one block per call.
//   llama3_json  {"name": "f", "parameters": {...}}, optionally after <|python_tag|>, as the whole
//                output (Llama 3.1 / 3.2); several calls are separated by ';'.
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]   and the newer
//                [TOOL_CALLS]f[ARGS]{...} (Mistral Small 3.2); ids are 9 letters and digits, which
//                Mistral's templates require when the call comes back in the history.
//   granite      <|tool_call|>[{"name": "f", "arguments": {...}}]   (Granite 3.x)
//   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```
//                <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>   (DeepSeek V3, R1 and its distillations)
//
// A parser reads the output piece by piece (ToolCallReader drives it), so streamed and whole
// answers split the same text the same way: scan() decides a prefix of the undecided text only
// when no continuation could change the decision. Text that looks like a call but is not one
// (JSON that does not parse, a call without a name) stays text.
#pragma once

#include <cstddef>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/api/tool_definitions.h"

namespace pagedkv::api {

struct ToolCall {
  std::string id;  // filled by ToolCallReader
  std::string name;
  std::string arguments;  // a JSON object, as compact JSON text (the model's key order)
};

// What scan() decided about the start of the undecided text.
struct ToolCallScan {
  enum class Kind {
    kText,  // [0, end) is text
    kCalls,  // [0, end) is markup holding `calls`
    kNeedMore,  // nothing can be decided before more text (or the end) arrives
  };
  Kind kind = Kind::kNeedMore;
  size_t end = 0;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual std::string_view name() const = 0;

  // Decides a prefix of `rest` (the output not yet decided; `at_output_start`: nothing came
  // before it). With `at_end` the output is complete: never kNeedMore, and a non-empty `rest`
  // always gets end > 0. Without it, kText/kCalls are returned only when final.
  virtual ToolCallScan scan(std::string_view rest, bool at_output_start, bool at_end) const = 0;

  // GBNF text whose language is calls in this syntax to `tools` (one of them; several in
  // sequence when `parallel`), arguments valid under each tool's parameters schema. ApiError 400
  // (param "tools") when a schema cannot become a grammar.
  virtual std::string forced_call_grammar(std::span<const ToolDefinition> tools, bool parallel) const = 0;

  // A new call id ("call_" and 24 letters and digits; Mistral: 9 letters and digits).
  virtual std::string new_call_id(std::mt19937_64& random) const;
};

// The parser named `name` ("hermes", "llama3_json", "mistral", "granite", "deepseek_v3"); nullptr
// for "none". Throws
// ConfigError for an unknown name.
std::shared_ptr<const ToolCallParser> make_tool_call_parser(std::string_view name);

// The syntax a Jinja chat template writes calls in, from its text (<tool_call>, [TOOL_CALLS],
// <|tool_call|>, DeepSeek's markers, <|python_tag|> or Llama 3's "parameters" JSON); "" when it
// shows none.
std::string_view detect_tool_call_syntax(std::string_view template_source);

// The names make_tool_call_parser knows, for --help and error messages.
std::string_view tool_call_parser_names();

// The end of the JSON object or array starting at text[0] ('{' or '['), found by bracket and
// string matching only (the caller parses it): kComplete with `end` one past it, kIncomplete when
// the text ends first, kInvalid when text[0] opens neither or brackets mismatch or nest too deep.
enum class JsonSpan { kComplete, kIncomplete, kInvalid };
JsonSpan json_container_span(std::string_view text, size_t& end);

}  // namespace pagedkv::api
