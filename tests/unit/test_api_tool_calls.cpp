// Tool calling in the API layer: the tools of a request, the messages handed to chat templates,
// the call parsers of each syntax on hand-written model outputs (whole, and streamed in random
// pieces, which must give the same content and calls), and the grammars that force a call.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagedkv/api/api_error.h"
#include "pagedkv/api/openai_request.h"
#include "pagedkv/api/tool_call_parser.h"
#include "pagedkv/api/tool_call_reader.h"
#include "pagedkv/api/tool_definitions.h"
#include "pagedkv/core/error.h"
#include "pagedkv/grammar/compiled_grammar.h"
#include "pagedkv/grammar/grammar_matcher.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "template_test_support.h"

namespace pagedkv::api {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
};

Parsed read_whole(const ToolCallParser& parser, std::string_view text) {
  ToolCallReader reader(parser, 1);
  ToolCallReader::Output a = reader.append(text);
  ToolCallReader::Output b = reader.finish();
  Parsed p{a.content + b.content, a.calls};
  p.calls.insert(p.calls.end(), b.calls.begin(), b.calls.end());
  return p;
}

Parsed read_in_pieces(const ToolCallParser& parser, std::string_view text, std::mt19937& random) {
  ToolCallReader reader(parser, 1);
  Parsed p;
  size_t at = 0;
  while (at < text.size()) {
    const size_t n = std::min<size_t>(text.size() - at, 1 + random() % 7);
    ToolCallReader::Output o = reader.append(text.substr(at, n));
    p.content += o.content;
    p.calls.insert(p.calls.end(), o.calls.begin(), o.calls.end());
    at += n;
  }
  ToolCallReader::Output o = reader.finish();
  p.content += o.content;
  p.calls.insert(p.calls.end(), o.calls.begin(), o.calls.end());
  return p;
}

// Whole and streamed (in many random chunkings) give the same content and calls; every call's
// arguments are a JSON object.
Parsed read_checked(const ToolCallParser& parser, std::string_view text) {
  const Parsed whole = read_whole(parser, text);
  std::mt19937 random(7);
  for (int round = 0; round < 50; ++round) {
    const Parsed streamed = read_in_pieces(parser, text, random);
    EXPECT_EQ(streamed.content, whole.content) << text;
    EXPECT_EQ(streamed.calls.size(), whole.calls.size()) << text;
    for (size_t i = 0; i < std::min(streamed.calls.size(), whole.calls.size()); ++i) {
      EXPECT_EQ(streamed.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments);
    }
  }
  for (const ToolCall& c : whole.calls) EXPECT_TRUE(json::parse(c.arguments).is_object()) << c.arguments;
  return whole;
}

TEST(ToolCallParser, HermesCallsAfterText) {
  const auto parser = make_tool_call_parser("hermes");
  const Parsed p =
      read_checked(*parser,
                   "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                   "\"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                   "{}}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","unit":"c"})");  // the model's key order
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_TRUE(p.calls[0].id.starts_with("call_"));
  EXPECT_EQ(p.calls[0].id.size(), 29u);
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
}

TEST(ToolCallParser, HermesArgumentsAsTextAndUnclosedBlock) {
  const auto parser = make_tool_call_parser("hermes");
  Parsed p = read_checked(*parser, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"x":[1,2]})");
  EXPECT_EQ(p.content, "");
  // The output ended before the closing tag: a complete call is still one.
  p = read_checked(*parser, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"<tool_call>\"}}\n");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"a":"<tool_call>"})");
}

TEST(ToolCallParser, HermesMalformedStaysText) {
  const auto parser = make_tool_call_parser("hermes");
  for (const std::string text :
       {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": 3}</tool_call>",
        "<tool_call>[1, 2]</tool_call>", "<tool_call>{\"name\": \"f\"} trailing</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "<tool_call>{\"name\": \"f\""}) {
    const Parsed p = read_checked(*parser, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  // Text that only starts like the tag is text, sent once it cannot be the tag.
  const Parsed p = read_checked(*parser, "a <tool_cal b <tool");
  EXPECT_EQ(p.content, "a <tool_cal b <tool");
}

TEST(ToolCallParser, StreamHoldsBackAPossibleTag) {
  const auto parser = make_tool_call_parser("hermes");
  ToolCallReader reader(*parser, 1);
  EXPECT_EQ(reader.append("Sure <tool").content, "Sure");
  EXPECT_EQ(reader.append("_call>{\"name\": \"f\"").content, "");
  ToolCallReader::Output o = reader.append(", \"arguments\": {}}</tool_call> done");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.content, "  done");  // the space before the call was held back until text followed
  EXPECT_EQ(reader.finish().content, "");
}

TEST(ToolCallParser, Llama3Json) {
  const auto parser = make_tool_call_parser("llama3_json");
  Parsed p = read_checked(*parser, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(p.content, "");
  p = read_checked(
      *parser, " <|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": 1}}\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].arguments, R"({"k":1})");
  for (const std::string text :
       {"Hello {\"name\": \"a\", \"parameters\": {}}", "{\"name\": \"a\", \"parameters\": {}} and text", "{not json}",
        "{\"name\": \"a\", \"parameters\": {", "<|python", "{\"parameters\": {}}"}) {
    p = read_checked(*parser, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
  EXPECT_EQ(read_checked(*parser, "Hello there").content, "Hello there");
}

TEST(ToolCallParser, MistralBothForms) {
  const auto parser = make_tool_call_parser("mistral");
  Parsed p = read_checked(*parser,
                          "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": "
                          "{\"s\": \"]\"}, \"id\": \"abcdefghi\"}]");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].arguments, R"({"s":"]"})");
  EXPECT_EQ(p.calls[0].id.size(), 9u);  // Mistral's templates require 9 letters and digits
  p = read_checked(
      *parser,
      "Calling.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}");
  EXPECT_EQ(p.content, "Calling.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  // Cut by max_tokens inside the list: the complete calls are calls, the rest text.
  p = read_checked(*parser, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"argu");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.content, ", {\"name\": \"b\", \"argu");
  // The control token left out of the decoded text: a bare array of calls.
  p = read_checked(*parser, "[{\"name\": \"a\", \"arguments\": {}}]");
  ASSERT_EQ(p.calls.size(), 1u);
  for (const std::string text : {"[TOOL_CALLS][{\"name\": \"a\"", "[TOOL_CALLS]{\"name\": \"a\"}", "[TOOL_CALLS][1]",
                                 "[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS]f(x)", "[1, 2] is a list"}) {
    p = read_checked(*parser, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallParser, Granite) {
  const auto parser = make_tool_call_parser("granite");
  const Parsed p = read_checked(*parser, "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}]");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"x"})");
}

TEST(ToolCallParser, DeepSeek) {
  const auto parser = make_tool_call_parser("deepseek_v3");
  const std::string block =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  Parsed p = read_checked(*parser, "Checking." + block);
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  for (const std::string text :
       {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": }\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}, \"x\": {}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{}"}) {
    p = read_checked(*parser, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  // Cut by max_tokens inside the block: the complete calls are calls, the rest text.
  p = read_checked(*parser, block.substr(0, block.find("get_time") + 4));
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.content, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_");
  EXPECT_EQ(detect_tool_call_syntax("{{'<｜tool▁calls▁begin｜>'}}"), "deepseek_v3");
}

TEST(ToolCallParser, NamesAndDetection) {
  EXPECT_EQ(make_tool_call_parser("none"), nullptr);
  EXPECT_THROW(make_tool_call_parser("pythonic"), ConfigError);
  EXPECT_EQ(detect_tool_call_syntax("{{ '<tool_call>' }}"), "hermes");
  EXPECT_EQ(detect_tool_call_syntax("{{ '[TOOL_CALLS][' }}"), "mistral");
  EXPECT_EQ(detect_tool_call_syntax("<|start_header_id|> {\"name\": x, \"parameters\": y}"), "llama3_json");
  EXPECT_EQ(detect_tool_call_syntax("<|im_start|>"), "");
}

TEST(ToolCallParser, JsonSpan) {
  size_t end = 0;
  EXPECT_EQ(json_container_span(R"({"a": "}\"]"} rest)", end), JsonSpan::kComplete);
  EXPECT_EQ(end, 13u);
  EXPECT_EQ(json_container_span(R"([{"a": [1, 2)", end), JsonSpan::kIncomplete);
  EXPECT_EQ(json_container_span(R"([1, 2})", end), JsonSpan::kInvalid);
  EXPECT_EQ(json_container_span("x", end), JsonSpan::kInvalid);
  EXPECT_EQ(json_container_span(std::string(10000, '['), end), JsonSpan::kInvalid);  // too deep
}

// ---- forced calls ------------------------------------------------------------------------------

std::shared_ptr<const grammar::TokenVocabulary> bytes_vocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.emplace_back();  // 256: stop
  return grammar::TokenVocabulary::create(std::move(tokens), {256});
}

bool grammar_accepts(const std::string& gbnf, std::string_view text) {
  grammar::GrammarMatcher m(grammar::compile_grammar(grammar::GrammarKind::kGbnf, gbnf, bytes_vocabulary()));
  return m.accept_bytes(text) && m.can_terminate();
}

std::vector<ToolDefinition> weather_tools() {
  return {{"get_weather", ordered_json::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"]})")},
          {"get_time", ordered_json::object()}};
}

TEST(ForcedToolCall, GrammarsAcceptExactlyValidCalls) {
  struct Case {
    const char* parser;
    std::string one, two, wrong_args, unknown_tool;
  };
  const std::vector<Case> cases = {
      {"hermes", "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"days\":3}}\n</tool_call>",
       "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_weather\","
       "\"arguments\":{\"city\":\"x\",\"days\":1}}\n</tool_call>",
       "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"days\":9}}\n</tool_call>",
       "<tool_call>\n{\"name\":\"other\",\"arguments\":{}}\n</tool_call>"},
      {"llama3_json", "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\",\"days\":3}}",
       "{\"name\":\"get_time\",\"parameters\":{}}; {\"name\":\"get_time\",\"parameters\":{}}",
       "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}", "{\"name\":\"other\",\"parameters\":{}}"},
      {"deepseek_v3",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Oslo\","
       "\"days\":3}"
       "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"
       "\n"
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"city\":\"Oslo\","
       "\"days\":3}"
       "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>other\n```json\n{}\n```<｜tool▁call▁end｜><"
       "｜tool▁calls▁end｜>"},
      {"mistral", "[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"days\":3}}]",
       "[TOOL_CALLS][{\"name\":\"get_time\",\"arguments\":{}},{\"name\":\"get_time\",\"arguments\":{}}]",
       "[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"days\":3}}]",
       "[TOOL_CALLS][{\"name\":\"x\",\"arguments\":{}}]"},
  };
  const std::vector<ToolDefinition> tools = weather_tools();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.parser);
    const auto parser = make_tool_call_parser(c.parser);
    const std::string parallel = parser->forced_call_grammar(tools, true);
    const std::string single = parser->forced_call_grammar(tools, false);
    EXPECT_TRUE(grammar_accepts(parallel, c.one));
    EXPECT_TRUE(grammar_accepts(single, c.one));
    EXPECT_TRUE(grammar_accepts(parallel, c.two));
    EXPECT_FALSE(grammar_accepts(single, c.two));  // parallel_tool_calls: false, one call
    EXPECT_FALSE(grammar_accepts(parallel, c.wrong_args));
    EXPECT_FALSE(grammar_accepts(parallel, c.unknown_tool));
    // A named tool: only that one.
    const std::vector<ToolDefinition> named = {tools[1]};
    EXPECT_FALSE(grammar_accepts(parser->forced_call_grammar(named, true), c.one));
    // What the grammar forces, the parser reads back as calls, and nothing else.
    const Parsed p = read_checked(*parser, c.two);
    EXPECT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.content, "");
  }
}

TEST(ForcedToolCall, SchemaRefsAndRefusals) {
  const auto parser = make_tool_call_parser("hermes");
  const std::vector<ToolDefinition> with_defs = {
      {"f", ordered_json::parse(R"({"type": "object", "properties": {"p": {"$ref": "#/$defs/point"}}, "required": ["p"],
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}})")}};
  EXPECT_TRUE(grammar_accepts(parser->forced_call_grammar(with_defs, false),
                              "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"p\":{\"x\":1}}}\n</tool_call>"));
  const std::vector<ToolDefinition> unsupported = {{"f", ordered_json::parse(R"({"type": "object", "not": {}})")}};
  try {
    parser->forced_call_grammar(unsupported, true);
    ADD_FAILURE() << "an unsupported keyword was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "tools");
  }
}

// ---- the request's fields ----------------------------------------------------------------------

const char* kTool = R"({"type": "function", "function": {"name": "get_weather", "description": "d",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";

CompletionRequest chat(const std::string& extra) {
  return parse_completion_request(R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}",
                                  ApiEndpoint::kChatCompletions, RequestLimits{});
}

void expect_400(const std::string& extra, const std::string& param) {
  try {
    chat(extra);
    ADD_FAILURE() << "accepted: " << extra;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(e.param(), param) << extra << ": " << e.what();
  }
}

TEST(ToolRequest, Choices) {
  CompletionRequest r = chat(fmt::format(R"(, "tools": [{}])", kTool));
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.tools.parses_calls());
  ASSERT_EQ(r.tools.tools.size(), 1u);
  EXPECT_EQ(r.tools.tools[0].parameters.dump(), R"({"type":"object","properties":{"city":{"type":"string"}}})");
  r = chat(fmt::format(R"(, "tools": [{}], "tool_choice": "required", "parallel_tool_calls": false)", kTool));
  EXPECT_EQ(r.tools.choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.tools.parallel_calls);
  r = chat(fmt::format(
      R"(, "tools": [{}], "tool_choice": {{"type": "function", "function": {{"name": "get_weather"}}}})", kTool));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.callable().size(), 1u);
  r = chat(fmt::format(R"(, "tools": [{}], "tool_choice": "none")", kTool));
  EXPECT_FALSE(r.tools.parses_calls());
  EXPECT_FALSE(r.chat_input.tools.is_null());  // still shown to the template, as vLLM does
  EXPECT_EQ(chat(R"(, "tool_choice": "auto")").tools.choice, ToolChoice::kNone);
}

TEST(ToolRequest, Refusals) {
  expect_400(R"(, "tools": {})", "tools");
  expect_400(R"(, "tools": [{"type": "code_interpreter"}])", "tools");
  expect_400(R"(, "tools": [{"type": "function", "function": {"name": "has space"}}])", "tools");
  expect_400(R"(, "tools": [{"type": "function", "function": {"name": ""}}])", "tools");
  expect_400(fmt::format(R"(, "tools": [{}, {}])", kTool, kTool), "tools");  // duplicate names
  expect_400(R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])", "tools");
  expect_400(R"(, "tool_choice": "required")", "tool_choice");
  expect_400(fmt::format(R"(, "tools": [{}], "tool_choice": "sometimes")", kTool), "tool_choice");
  expect_400(
      fmt::format(R"(, "tools": [{}], "tool_choice": {{"type": "function", "function": {{"name": "nope"}}}})", kTool),
      "tool_choice");
  expect_400(fmt::format(R"(, "tools": [{}], "parallel_tool_calls": 1)", kTool), "parallel_tool_calls");
  expect_400(
      fmt::format(R"(, "tools": [{}], "tool_choice": "required", "response_format": {{"type": "json_object"}})", kTool),
      "response_format");
  std::string many = R"(, "tools": [)";
  for (int i = 0; i < 129; ++i)
    many += fmt::format(R"({}{{"type": "function", "function": {{"name": "f{}"}}}})", i ? "," : "", i);
  expect_400(many + "]", "tools");
}

TEST(ToolRequest, HistoryForTemplates) {
  const std::string body = R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"z\": 1, \"a\": [true]}"}}]},
      {"role": "tool", "tool_call_id": "call00001", "content": "sunny"}]})";
  const CompletionRequest r = parse_completion_request(body, ApiEndpoint::kChatCompletions, RequestLimits{});
  const ordered_json& m = r.chat_input.messages;
  EXPECT_EQ(m[1]["content"], "");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"].dump(), R"({"z":1,"a":[true]})");
  EXPECT_TRUE(has_tool_history(m));
  for (const std::string bad :
       {R"({"role": "tool", "content": "x"})", R"({"role": "user", "content": "x", "tool_calls": []})",
        R"({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})",
        R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]})"}) {
    EXPECT_THROW(
        parse_completion_request(R"({"messages": [)" + bad + "]}", ApiEndpoint::kChatCompletions, RequestLimits{}),
        ApiError)
        << bad;
  }
}

// The built-in templates have no tool format: tools or tool history with them are a 400.
TEST(ToolRequest, BuiltInTemplatesRefuseTools) {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  const std::filesystem::path tok512 = std::filesystem::path(shared ? shared : "") / "models" / "tok512.bin";
  if (shared == nullptr || !std::filesystem::exists(tok512))
    GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models/tok512.bin is absent";
  const Tokenizer tokenizer(tok512.string(), 512);
  const ModelLimits limits{"stories260K", 512, 512};
  const CompletionRequest with_tools = chat(fmt::format(R"(, "tools": [{}], "tool_choice": "none")", kTool));
  try {
    prepare_request(with_tools, tokenizer, limits, ChatTemplate::kChatml);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "tools");
    EXPECT_EQ(e.code(), "unsupported_tools");
  }
  const CompletionRequest history = parse_completion_request(
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "a", "content": "y"}]})",
      ApiEndpoint::kChatCompletions, RequestLimits{});
  EXPECT_THROW(prepare_request(history, tokenizer, limits), ApiError);
  EXPECT_NO_THROW(prepare_request(chat(""), tokenizer, limits));
}

// The shared conversations with tools and tool calls, sent as OpenAI's clients send them
// (arguments as JSON text, content null beside tool calls), reach the model's template as the
// oracle's conversations do: every template renders them as Python's jinja2 rendered those.
TEST(ToolRequest, WireConversationsRenderAsTheOracle) {
  PAGEDKV_REQUIRE_CHAT_TEMPLATES(dir);
  testing::ChatTemplateOracle oracle(dir);
  int compared = 0;
  for (const auto& row : oracle.expected) {
    const std::string name = row["template"], id = row["conversation"];
    ordered_json conversation = oracle.conversations.at(id);
    // c11 already sends its arguments as text: the server hands the template an object there.
    if (!conversation.contains("tools") || id == "c11_arguments_as_string") continue;
    SCOPED_TRACE(name + " / " + id);
    ordered_json wire = conversation["messages"];
    for (ordered_json& m : wire) {
      if (!m.contains("tool_calls")) continue;
      for (ordered_json& call : m["tool_calls"])
        call["function"]["arguments"] = call["function"]["arguments"].dump(-1, ' ', false);
      if (m["content"] == "") m["content"] = nullptr;
    }
    ordered_json body = {{"messages", wire},
                         {"tools", conversation["tools"]},
                         {"add_generation_prompt", conversation["add_generation_prompt"]}};
    if (conversation.contains("template_kwargs")) body["chat_template_kwargs"] = conversation["template_kwargs"];
    const CompletionRequest r = parse_completion_request(body.dump(), ApiEndpoint::kChatCompletions, RequestLimits{});
    ordered_json as_sent = conversation;
    as_sent["messages"] = r.chat_input.messages;
    as_sent["tools"] = r.chat_input.tools;
    const ordered_json vars = testing::render_variables(as_sent, oracle.tokens_of(name));
    const jinja::Template t(oracle.templates.at(name));
    if (row["ok"].get<bool>()) {
      EXPECT_EQ(t.render(vars, testing::oracle_options()), row["text"].get<std::string>());
      ++compared;
    } else {
      EXPECT_THROW(t.render(vars, testing::oracle_options()), jinja::TemplateError);
    }
  }
  EXPECT_GE(compared, 50);
}

}  // namespace
}  // namespace pagedkv::api
