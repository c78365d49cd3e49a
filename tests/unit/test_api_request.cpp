// The API layer's request handling without a server: parsing and validation of every bad input
// (status, field, message), the chat template, and stop strings over split pieces.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "golden_support.h"
#include "thread_cpu_time.h"
#include "tok512_fixture.h"
#include "pagedkv/api/api_error.h"
#include "pagedkv/api/openai_request.h"
#include "pagedkv/api/request_fields.h"
#include "pagedkv/api/stop_string_matcher.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv::api {
namespace {

using nlohmann::json;

CompletionRequest parse(const json& body, ApiEndpoint e = ApiEndpoint::kCompletions) {
  return parse_completion_request(body.dump(), e, RequestLimits{});
}

// Expects `body` to be refused with 400, naming `param`, with `fragment` in the message.
void expect_rejected(const std::string& body, const std::string& param, const std::string& fragment,
                     ApiEndpoint e = ApiEndpoint::kCompletions) {
  try {
    parse_completion_request(body, e, RequestLimits{});
    ADD_FAILURE() << "accepted: " << body;
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status(), 400) << body;
    EXPECT_EQ(err.param(), param) << body;
    EXPECT_NE(std::string(err.what()).find(fragment), std::string::npos) << body << " -> " << err.what();
    const json j = err.to_json();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"].size(), 4u);
  }
}

TEST(ServerRequest, ParsesEveryField) {
  const CompletionRequest r = parse({{"model", "m"},
                                     {"prompt", "hi"},
                                     {"max_tokens", 7},
                                     {"temperature", 0.5},
                                     {"top_p", 0.9},
                                     {"top_k", 5},
                                     {"seed", 42},
                                     {"n", 3},
                                     {"stop", {"a", "bc"}},
                                     {"stream", true},
                                     {"stream_options", {{"include_usage", true}}},
                                     {"echo", true},
                                     {"logprobs", 2},
                                     {"priority", -1},
                                     {"cache_salt", "t1"},
                                     {"ignore_eos", true},
                                     {"unknown_field", {1, 2}}});
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 5);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.echo && r.ignore_eos);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.priority, -1);
  EXPECT_EQ(r.cache_salt, "t1");
  EXPECT_FALSE(r.use_beam_search);
  EXPECT_TRUE(parse({{"prompt", "hi"}, {"n", 4}, {"use_beam_search", true}}).use_beam_search);
  EXPECT_FALSE(r.include_stop_str_in_output || r.return_token_ids || r.return_tokens_as_token_ids || r.timeout);
  EXPECT_TRUE(r.skip_special_tokens);
}

TEST(ServerRequest, OutputSwitchesAndTimeout) {
  const CompletionRequest r = parse({{"prompt", "hi"},
                                     {"include_stop_str_in_output", true},
                                     {"skip_special_tokens", false},
                                     {"return_token_ids", true},
                                     {"return_tokens_as_token_ids", true},
                                     {"timeout", 2.5}});
  EXPECT_TRUE(r.include_stop_str_in_output && r.return_token_ids && r.return_tokens_as_token_ids);
  EXPECT_FALSE(r.skip_special_tokens);
  ASSERT_TRUE(r.timeout);
  EXPECT_EQ(r.timeout->count(), 2500);
  for (const json& bad : {json(0), json(-1), json("5"), json(1e9)})
    EXPECT_THROW(parse({{"prompt", "hi"}, {"timeout", bad}}), ApiError) << bad.dump();
  EXPECT_THROW(parse({{"prompt", "hi"}, {"return_token_ids", "yes"}}), ApiError);
}

TEST(ServerRequest, PromptForms) {
  EXPECT_EQ(parse({{"prompt", {1, 2, 3}}}).prompts[0].token_ids, (std::vector<TokenId>{1, 2, 3}));
  const auto many = parse({{"prompt", json::array({"a", json::array({4, 5}), "b"})}}).prompts;
  ASSERT_EQ(many.size(), 3u);
  EXPECT_TRUE(many[0].is_text && !many[1].is_text && many[2].is_text);
  EXPECT_EQ(many[1].token_ids, (std::vector<TokenId>{4, 5}));
  // Nulls are "not given", as OpenAI's clients send them.
  const CompletionRequest r = parse({{"prompt", "x"}, {"max_tokens", nullptr}, {"stop", nullptr}, {"seed", nullptr}});
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.seed.has_value());
}

TEST(ServerRequest, ChatFields) {
  const CompletionRequest r = parse(
      {{"messages",
        {{{"role", "system"}, {"content", "S"}},
         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
       {"max_completion_tokens", 9},
       {"max_tokens", 3},
       {"logprobs", true},
       {"top_logprobs", 4}},
      ApiEndpoint::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 9) << "max_completion_tokens wins";
  EXPECT_EQ(r.logprobs, 4);
  EXPECT_EQ(
      parse({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"logprobs", true}}, ApiEndpoint::kChatCompletions)
          .logprobs,
      0);
  EXPECT_EQ(render_chat_prompt(r.messages), "S\nUser: ab\nAssistant:");
  const std::vector<ChatMessage> turns{
      {"user", "hi"}, {"assistant", "hello"}, {"developer", "be kind"}, {"user", "go"}};
  EXPECT_EQ(render_chat_prompt(turns), "User: hi\nAssistant: hello\nbe kind\nUser: go\nAssistant:");
}

// A chat body holding one object of 200,000 members (2.6 MB, under the server's 8 MiB): its ordered
// parses (tools, the chat template's input) take a fraction of a second, where the ordered
// parser's search of the members before each one took minutes of a server thread.
TEST(ServerRequest, LargeObjectsParseInLinearTime) {
  std::string body = R"({"messages": [{"role": "user", "content": "x"}], "metadata": {)";
  for (int i = 0; i < 200000; ++i) body += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": \"v\"";
  body += "}}";
  const double start = pagedkv::testing::thread_cpu_seconds();
  const CompletionRequest r = parse_completion_request(body, ApiEndpoint::kChatCompletions, RequestLimits{});
  EXPECT_LT(pagedkv::testing::thread_cpu_seconds() - start, 2.0);
  ASSERT_EQ(r.messages.size(), 1u);
}

// A body nesting arrays 4 million deep (8 MB): refused with a 400 before it is parsed (parsing
// it took 3 s and 770 MB).
TEST(ServerRequest, DeeplyNestedBodiesAreRefused) {
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "metadata": )" +
                           std::string(4'000'000, '[') + std::string(4'000'000, ']') + "}";
  const double start = pagedkv::testing::thread_cpu_seconds();
  try {
    parse_completion_request(body, ApiEndpoint::kChatCompletions, RequestLimits{});
    ADD_FAILURE() << "parsed";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("more than 128 levels deep"), std::string::npos) << e.what();
  }
  EXPECT_LT(pagedkv::testing::thread_cpu_seconds() - start, 0.5);
}

TEST(ServerRequest, RejectsBadInput) {
  expect_rejected("{not json", "", "not valid JSON");
  // Invalid UTF-8 is named as such (JSON text is UTF-8), with the offending byte's offset.
  expect_rejected("{\"prompt\": \"ab\xff\"}", "", "not valid UTF-8 (byte 14 of 17)");
  expect_rejected("{\"prompt\": \"\xed\xa0\x80\"}", "", "not valid UTF-8");  // a UTF-16 surrogate
  expect_rejected("{\"prompt\": \"\xc0\xaf\"}", "", "not valid UTF-8");  // an overlong '/'
  EXPECT_NO_THROW(parse({{"prompt", "caf\xc3\xa9 \xf0\x9f\x98\x80"}}));  // é and an emoji
  expect_rejected("[1]", "", "must be a JSON object");
  expect_rejected("{}", "prompt", "is required");
  expect_rejected(R"({"prompt": 3})", "prompt", "must be a string");
  expect_rejected(R"({"prompt": []})", "prompt", "empty list");
  expect_rejected(R"({"prompt": [[]]})", "prompt", "empty list");
  expect_rejected(R"({"prompt": [1, "a"]})", "prompt", "must be a string");
  expect_rejected(R"({"prompt": [1, -1]})", "prompt", "outside the vocabulary");
  expect_rejected(R"({"prompt": [1, 3000000000]})", "prompt", "outside the vocabulary");
  expect_rejected(R"({"prompt": [true]})", "prompt", "must be a string");
  expect_rejected(R"({"prompt": "x", "model": 3})", "model", "must be a string");
  expect_rejected(R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "must be an integer");
  expect_rejected(R"({"prompt": "x", "max_tokens": "5"})", "max_tokens", "must be an integer");
  expect_rejected(R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "between 1");
  expect_rejected(R"({"prompt": "x", "max_tokens": 99999999999})", "max_tokens", "between 1");
  expect_rejected(R"({"prompt": "x", "n": 0})", "n", "between 1 and 64");
  expect_rejected(R"({"prompt": "x", "n": 65})", "n", "between 1 and 64");
  expect_rejected(R"({"prompt": "x", "temperature": -0.1})", "temperature", "at least 0");
  expect_rejected(R"({"prompt": "x", "temperature": "hot"})", "temperature", "must be a number");
  expect_rejected(R"({"prompt": "x", "top_p": 0})", "top_p", "(0, 1]");
  expect_rejected(R"({"prompt": "x", "top_p": 1.5})", "top_p", "(0, 1]");
  expect_rejected(R"({"prompt": "x", "top_k": -2})", "top_k", "between -1");
  expect_rejected(R"({"prompt": "x", "seed": "1"})", "seed", "must be an integer");
  expect_rejected(R"({"prompt": "x", "stop": [1]})", "stop", "must be a string");
  expect_rejected(R"({"prompt": "x", "stop": {}})", "stop", "string or a list");
  expect_rejected(R"({"prompt": "x", "stop": ""})", "stop", "must not be empty");
  expect_rejected(R"({"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
                  "stop", "at most 16");
  expect_rejected(R"({"prompt": "x", "stream": "yes"})", "stream", "must be a boolean");
  expect_rejected(R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options", "only allowed");
  expect_rejected(R"({"prompt": "x", "stream": true, "stream_options": 1})", "stream_options", "must be an object");
  expect_rejected(R"({"prompt": "x", "echo": 1})", "echo", "must be a boolean");
  expect_rejected(R"({"prompt": "x", "logprobs": 21})", "logprobs", "between 0 and 20");
  expect_rejected(R"({"prompt": "x", "logprobs": true})", "logprobs", "must be an integer");
  expect_rejected(R"({"prompt": "x", "priority": "high"})", "priority", "must be an integer");
  expect_rejected(R"({"prompt": "x", "cache_salt": ""})", "cache_salt", "must not be empty");
  expect_rejected(R"({"prompt": "x", "cache_salt": 5})", "cache_salt", "must be a string");
  expect_rejected(R"({"prompt": "x", "ignore_eos": 0})", "ignore_eos", "must be a boolean");
  expect_rejected(R"({"prompt": "x", "use_beam_search": 1})", "use_beam_search", "must be a boolean");
  expect_rejected(R"({"prompt": "x", "use_beam_search": true, "stream": true})", "use_beam_search", "does not stream");
  expect_rejected(R"({"prompt": "x", "use_beam_search": true, "logprobs": 1})", "use_beam_search", "logprobs");
  json prompts = json::array();
  for (int i = 0; i < 65; ++i) prompts.push_back("p");
  expect_rejected(json{{"prompt", prompts}}.dump(), "prompt", "at most 64 prompts");
  // Chat.
  const auto chat = ApiEndpoint::kChatCompletions;
  expect_rejected(R"({"prompt": "x"})", "messages", "is required", chat);
  expect_rejected(R"({"messages": []})", "messages", "non-empty list", chat);
  expect_rejected(R"({"messages": [3]})", "messages", "must be an object", chat);
  expect_rejected(R"({"messages": [{"content": "x"}]})", "messages", "string 'role'", chat);
  expect_rejected(R"({"messages": [{"role": "robot", "content": "x"}]})", "messages", "unsupported message role", chat);
  expect_rejected(R"({"messages": [{"role": "tool", "content": "x"}]})", "messages", "tool_call_id", chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": 5}]})", "messages", "string or a list of text parts",
                  chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages",
                  "only text content", chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs",
                  "needs 'logprobs'", chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 30})",
                  "top_logprobs", "between 0 and 20", chat);
}

// Expects `parse` to throw ApiError 400 naming `param` with `code`.
template <typename Parse>
void expect_api_error(Parse&& parse, const std::string& param, const std::string& code) {
  try {
    parse();
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status(), 400);
    EXPECT_EQ(err.param(), param);
    EXPECT_EQ(err.to_json()["error"]["code"], code) << err.what();
  }
}

TEST(ServerRequest, TokenizeBodies) {
  TokenizeRequest r = parse_tokenize_request(R"({"prompt": "hi", "add_special_tokens": false})");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_FALSE(r.add_special_tokens);
  r = parse_tokenize_request(R"({"messages": [{"role": "user", "content": "hello"}], "add_special_tokens": null})");
  EXPECT_FALSE(r.prompt.has_value());
  EXPECT_TRUE(r.add_special_tokens);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "hello");

  expect_api_error([] { parse_tokenize_request("[1]"); }, "", "invalid_json");
  expect_api_error([] { parse_tokenize_request("{\"prompt\": "); }, "", "invalid_json");
  expect_api_error([] { parse_tokenize_request("{}"); }, "prompt", "missing_field");
  expect_api_error([] { parse_tokenize_request(R"({"prompt": [1, 2]})"); }, "prompt", "invalid_type");
  expect_api_error([] { parse_tokenize_request(R"({"prompt": "a", "add_special_tokens": 1})"); }, "add_special_tokens",
                   "invalid_type");
  expect_api_error([] { parse_tokenize_request(R"({"messages": []})"); }, "messages", "invalid_type");
  expect_api_error([] { parse_tokenize_request(R"({"messages": [{"role": "robot", "content": "x"}]})"); }, "messages",
                   "invalid_value");
}

TEST(ServerRequest, DetokenizeBodies) {
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [1, 0, 511]})", 512), (std::vector<TokenId>{1, 0, 511}));
  EXPECT_TRUE(parse_detokenize_request(R"({"tokens": []})", 512).empty());
  expect_api_error([] { parse_detokenize_request("{}", 512); }, "tokens", "missing_field");
  expect_api_error([] { parse_detokenize_request(R"({"tokens": "1 2"})", 512); }, "tokens", "missing_field");
  expect_api_error([] { parse_detokenize_request(R"({"tokens": [1.5]})", 512); }, "tokens", "invalid_type");
  expect_api_error([] { parse_detokenize_request(R"({"tokens": [512]})", 512); }, "tokens", "invalid_token_id");
  expect_api_error([] { parse_detokenize_request(R"({"tokens": [-1]})", 512); }, "tokens", "invalid_token_id");
  expect_api_error([] { parse_detokenize_request(R"({"tokens": [18446744073709551615]})", 512); }, "tokens",
                   "invalid_token_id");
}

// ---- fields of the schemas that pagedkv does not implement ---------------------------------------

TEST(RequestFields, UnimplementedFieldsAreRefusedByNameUnlessNeutral) {
  const json chat_base = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  struct Case {
    const char* field;
    json value;
    ApiEndpoint endpoint;
  };
  const Case refused[] = {
      {"best_of", 3, ApiEndpoint::kCompletions},
      {"continue_final_message", true, ApiEndpoint::kChatCompletions},
      {"logits_processors", {"x"}, ApiEndpoint::kCompletions},
      {"chat_template", "{{ messages }}", ApiEndpoint::kChatCompletions},
      {"truncate_prompt_tokens", 8, ApiEndpoint::kChatCompletions},
      {"functions", json::array({{{"name", "f"}}}), ApiEndpoint::kChatCompletions},
      {"function_call", "auto", ApiEndpoint::kChatCompletions},
      {"audio", {{"voice", "alloy"}}, ApiEndpoint::kChatCompletions},
      {"modalities", {"text", "audio"}, ApiEndpoint::kChatCompletions},
      {"length_penalty", 2, ApiEndpoint::kCompletions},
      {"allowed_token_ids", {1, 2}, ApiEndpoint::kCompletions},
      {"bad_words", {"x"}, ApiEndpoint::kCompletions},
      {"guided_whitespace_pattern", "[ ]*", ApiEndpoint::kCompletions},
      {"echo", true, ApiEndpoint::kChatCompletions},
  };
  for (const Case& c : refused) {
    json body = c.endpoint == ApiEndpoint::kChatCompletions ? chat_base : json{{"prompt", "x"}};
    body[c.field] = c.value;
    try {
      parse_completion_request(body.dump(), c.endpoint, RequestLimits{});
      ADD_FAILURE() << "accepted: " << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << c.field;
      EXPECT_EQ(e.param(), c.field);
      EXPECT_EQ(e.code(), "unsupported_field") << c.field;
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
    }
  }
  // What clients send by default changes nothing and is accepted.
  json neutral = chat_base;
  neutral.update({{"presence_penalty", 0},
                  {"frequency_penalty", 0.0},
                  {"logit_bias", json::object()},
                  {"tools", json::array()},
                  {"tool_choice", "none"},
                  {"response_format", {{"type", "text"}}},
                  {"modalities", {"text"}},
                  {"user", "u-1"},
                  {"metadata", {{"k", "v"}}},
                  {"parallel_tool_calls", true},
                  {"audio", nullptr},
                  {"min_p", 0},
                  {"repetition_penalty", 1}});
  EXPECT_NO_THROW(parse_completion_request(neutral.dump(), ApiEndpoint::kChatCompletions, RequestLimits{}));
  EXPECT_NO_THROW(parse({{"prompt", "x"}, {"n", 2}, {"best_of", 2}})) << "best_of equal to n asks for nothing more";
  EXPECT_NO_THROW(parse({{"prompt", "x"}, {"suffix", ""}}));
}

// ---- structured output: response_format, structured_outputs, guided_* --------------------------

TEST(StructuredOutput, EachFieldGivesItsGrammar) {
  using grammar::GrammarKind;
  const json chat_base = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  struct Case {
    json fields;
    GrammarKind kind;
    std::string text;
    std::string param;
  };
  const Case cases[] = {
      {{{"response_format", {{"type", "json_object"}}}}, GrammarKind::kJsonObject, "", "response_format"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}, {"strict", true}}}}}},
       GrammarKind::kJsonSchema,
       schema.dump(),
       "response_format"},
      {{{"structured_outputs", {{"json", schema}}}}, GrammarKind::kJsonSchema, schema.dump(), "structured_outputs"},
      {{{"structured_outputs", {{"json", schema.dump()}, {"backend", "auto"}}}},
       GrammarKind::kJsonSchema,
       schema.dump(),
       "structured_outputs"},
      {{{"structured_outputs", {{"regex", "[a-z]+"}}}}, GrammarKind::kRegex, "[a-z]+", "structured_outputs"},
      {{{"structured_outputs", {{"choice", {"yes", "no"}}}}},
       GrammarKind::kChoice,
       R"(["yes","no"])",
       "structured_outputs"},
      {{{"structured_outputs", {{"grammar", "root ::= \"x\""}}}},
       GrammarKind::kGbnf,
       "root ::= \"x\"",
       "structured_outputs"},
      {{{"structured_outputs", {{"json_object", true}}}}, GrammarKind::kJsonObject, "", "structured_outputs"},
      {{{"guided_json", schema}, {"guided_decoding_backend", "xgrammar"}},
       GrammarKind::kJsonSchema,
       schema.dump(),
       "guided_json"},
      {{{"guided_regex", "\\d+"}}, GrammarKind::kRegex, "\\d+", "guided_regex"},
      {{{"guided_choice", {"a", "b"}}}, GrammarKind::kChoice, R"(["a","b"])", "guided_choice"},
      {{{"guided_grammar", "root ::= [a-z]+"}}, GrammarKind::kGbnf, "root ::= [a-z]+", "guided_grammar"},
  };
  for (const Case& c : cases)
    for (const ApiEndpoint endpoint : {ApiEndpoint::kCompletions, ApiEndpoint::kChatCompletions}) {
      json body = endpoint == ApiEndpoint::kChatCompletions ? chat_base : json{{"prompt", "x"}};
      body.update(c.fields);
      const CompletionRequest r = parse_completion_request(body.dump(), endpoint, RequestLimits{});
      ASSERT_TRUE(r.structured_output) << body.dump();
      EXPECT_EQ(r.structured_output->kind, c.kind) << body.dump();
      EXPECT_EQ(r.structured_output->text, c.text) << body.dump();
      EXPECT_EQ(r.structured_output->param, c.param) << body.dump();
    }
  // The schema keeps the client's key order (properties are generated in it).
  const std::string body =
      R"({"prompt": "x", "guided_json": {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}}}})";
  const CompletionRequest ordered = parse_completion_request(body, ApiEndpoint::kCompletions, RequestLimits{});
  ASSERT_TRUE(ordered.structured_output);
  EXPECT_EQ(ordered.structured_output->text,
            R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}})");
  EXPECT_FALSE(parse({{"prompt", "x"}, {"response_format", {{"type", "text"}}}}).structured_output);
  EXPECT_FALSE(parse({{"prompt", "x"}}).structured_output);
}

TEST(StructuredOutput, RefusesTwoFieldsAndMalformedOnes) {
  auto refused = [](const json& fields, const std::string& param, const std::string& fragment) {
    json body = {{"prompt", "x"}};
    body.update(fields);
    try {
      parse_completion_request(body.dump(), ApiEndpoint::kCompletions, RequestLimits{});
      ADD_FAILURE() << "accepted: " << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), param) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  refused({{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}, "guided_regex", "at most one");
  refused({{"structured_outputs", {{"regex", "a"}}}, {"guided_json", {{"type", "object"}}}}, "guided_json",
          "at most one");
  refused({{"structured_outputs", {{"regex", "a"}, {"choice", {"a"}}}}}, "structured_outputs", "exactly one");
  refused({{"structured_outputs", json::object()}}, "structured_outputs", "needs one of");
  refused({{"structured_outputs", {{"structural_tag", "x"}}}}, "structured_outputs", "structural_tag");
  refused({{"response_format", {{"type", "json_schema"}}}}, "response_format", "json_schema");
  refused({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}}}}}}, "response_format",
          "schema");
  refused({{"response_format", {{"type", "yaml"}}}}, "response_format", "yaml");
  refused({{"guided_choice", json::array()}}, "guided_choice", "non-empty list");
  refused({{"guided_choice", {1, 2}}}, "guided_choice", "list of strings");
  refused({{"guided_json", "{not json"}}, "guided_json", "JSON Schema");
  refused({{"guided_regex", 3}}, "guided_regex", "string");
  refused({{"guided_json", {{"type", "object"}}}, {"use_beam_search", true}, {"n", 2}}, "guided_json", "beam search");
}

TEST(RequestFields, FieldsNoSchemaDefinesAreIgnoredAndNamed) {
  const json body = {{"prompt", "x"}, {"max_tokens", 2}, {"temprature", 0.5}, {"my_field", 1}};
  EXPECT_NO_THROW(parse(body));
  EXPECT_EQ(unknown_fields(body, ApiEndpoint::kCompletions), (std::vector<std::string>{"my_field", "temprature"}));
  // A chat-only field is unknown to completions.
  EXPECT_EQ(unknown_fields(json{{"prompt", "x"}, {"messages", json::array()}}, ApiEndpoint::kCompletions),
            (std::vector<std::string>{"messages"}));
  EXPECT_TRUE(
      unknown_fields(json{{"messages", json::array()}, {"top_logprobs", 2}}, ApiEndpoint::kChatCompletions).empty());
}

// ---- with the stories260K tokenizer (tok512_fixture.h) ------------------------------------------

void expect_prepare_rejected(const CompletionRequest& r, const Tokenizer& t, const ModelLimits& m,
                             const std::string& param, const std::string& fragment, int status = 400) {
  try {
    prepare_request(r, t, m);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), status);
    EXPECT_EQ(e.param(), param);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(Tok512Fixture, PreparesPrompts) {
  const auto p = prepare_request(parse({{"prompt", "Once upon a time"}}), *tokenizer_, limits());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].token_ids, (std::vector<TokenId>{1, 403, 407, 261, 378}));
  EXPECT_EQ(p[0].max_tokens, 16) << "OpenAI's completions default";
  const auto chat =
      prepare_request(parse({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, ApiEndpoint::kChatCompletions),
                      *tokenizer_, limits());
  EXPECT_EQ(chat[0].token_ids, tokenizer_->encode("User: Hi\nAssistant:", true, false));
  EXPECT_EQ(chat[0].max_tokens, 512 - static_cast<int>(chat[0].token_ids.size())) << "chat: the rest of the context";
  const auto ids = prepare_request(parse({{"prompt", {5, 6}}, {"max_tokens", 510}}), *tokenizer_, limits());
  EXPECT_EQ(ids[0].token_ids, (std::vector<TokenId>{5, 6})) << "token prompts are used as given";
}

TEST_F(Tok512Fixture, RejectsWhatTheModelCannotServe) {
  expect_prepare_rejected(parse({{"prompt", "x"}, {"model", "gpt-4"}}), *tokenizer_, limits(), "model",
                          "does not exist", 404);
  expect_prepare_rejected(parse({{"prompt", {1, 512}}}), *tokenizer_, limits(), "prompt",
                          "outside the vocabulary [0, 512)");
  expect_prepare_rejected(
      parse({{"prompt", {1, 2}}, {"max_tokens", 511}}), *tokenizer_, limits(), "max_tokens",
      "maximum context length is 512 tokens; you requested 513 tokens (2 in the prompt, 511 for the completion)");
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += " a";
  expect_prepare_rejected(parse({{"prompt", long_text}}), *tokenizer_, limits(), "prompt",
                          "leaving no room to generate");
  EXPECT_NO_THROW(prepare_request(parse({{"prompt", "x"}, {"model", "stories260K"}}), *tokenizer_, limits()));
}

// The llama2c tokenizer's encoding is quadratic in the text: 32K characters took 0.5 s here, the
// 8 MiB a body may hold would take hours. A text longer than max_model_len x the longest piece (tok512: 7 bytes) cannot
// fit whatever its tokens, and is refused before it is encoded.
TEST_F(Tok512Fixture, RefusesTextsTooLongToFitBeforeEncodingThem) {
  ASSERT_EQ(tokenizer_->max_piece_bytes(), 7);
  const std::string fits(512 * 7, '\n');  // the longest text that might still fit: it is encoded
  expect_prepare_rejected(parse({{"prompt", fits}}), *tokenizer_, limits(), "prompt", "leaving no room to generate");
  // The message says which check refused it: the one before encoding (encoding would have said
  // "leaving no room to generate", hours later).
  const std::string huge(4u << 20, 'a');
  expect_prepare_rejected(parse({{"prompt", huge}}), *tokenizer_, limits(), "prompt",
                          "a prompt of 4194304 bytes cannot fit (no token of this vocabulary is longer than 7 bytes)");
  expect_prepare_rejected(parse({{"messages", {{{"role", "user"}, {"content", huge}}}}}, ApiEndpoint::kChatCompletions),
                          *tokenizer_, limits(), "messages", "cannot fit");
  try {
    encode_bounded(*tokenizer_, huge, true, 512, "prompt");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "context_length_exceeded");
  }
}

// ---- suffix: fill-in-the-middle -----------------------------------------------------------------

TEST(FillInTheMiddle, QwenVocabularyBuildsThePrefixSuffixMiddlePrompt) {
  const auto vocab = pagedkv::testing::models_dir() / "gguf" / "vocab" / "ggml-vocab-qwen3.gguf";
  if (!std::filesystem::exists(vocab)) GTEST_SKIP() << vocab << " is absent (PAGEDKV_SHARED_DIR)";
  GgufFile file(vocab.string());
  const GgufBpeTokenizer tokenizer(file);
  const std::optional<FillInMiddleTokens> fim = tokenizer.fill_in_middle_tokens();
  ASSERT_TRUE(fim.has_value());
  EXPECT_EQ(fim->prefix, tokenizer.token_of("<|fim_prefix|>"));
  EXPECT_EQ(fim->suffix, tokenizer.token_of("<|fim_suffix|>"));
  EXPECT_EQ(fim->middle, tokenizer.token_of("<|fim_middle|>"));
  EXPECT_GE(fim->prefix, 0);
  const std::string prefix = "def add(a, b):\n    return ", suffix = "\n\nprint(add(1, 2))\n";
  const CompletionRequest r = parse({{"prompt", {prefix, prefix + "a"}}, {"suffix", suffix}});
  const ModelLimits limits{"m", 4096, tokenizer.vocab_size()};
  const std::vector<PreparedPrompt> prepared = prepare_request(r, tokenizer, limits);
  ASSERT_EQ(prepared.size(), 2u);
  std::vector<TokenId> expected{fim->prefix};  // Qwen's vocabulary adds no BOS
  for (TokenId t : tokenizer.encode(prefix, false)) expected.push_back(t);
  expected.push_back(fim->suffix);
  for (TokenId t : tokenizer.encode(suffix, false)) expected.push_back(t);
  expected.push_back(fim->middle);
  EXPECT_EQ(prepared[0].token_ids, expected);
  EXPECT_EQ(tokenizer.special_text(prepared[0].token_ids.front()), "<|fim_prefix|>") << "a control token";
  // Token-id prompts cannot be split into prefix and suffix.
  try {
    prepare_request(parse({{"prompt", {1, 2, 3}}, {"suffix", suffix}}), tokenizer, limits);
    ADD_FAILURE() << "a token-id prompt with a suffix was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "suffix");
  }
  // An empty suffix is no suffix.
  EXPECT_EQ(prepare_request(parse({{"prompt", prefix}, {"suffix", ""}}), tokenizer, limits)[0].token_ids,
            tokenizer.encode(prefix, true));
}

TEST(FillInTheMiddle, VocabularyWithoutTheTokensRefusesSuffixByName) {
  const auto model = pagedkv::testing::models_dir() / "stories260Ktok512.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is absent (PAGEDKV_SHARED_DIR)";
  GgufFile file(model.string());
  const GgufTokenizer tokenizer(file);
  EXPECT_FALSE(tokenizer.fill_in_middle_tokens().has_value());
  try {
    prepare_request(parse({{"prompt", "Once"}, {"suffix", " the end"}}), tokenizer, {"m", 256, tokenizer.vocab_size()});
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "suffix");
    EXPECT_EQ(e.code(), "unsupported_field");
    EXPECT_NE(std::string(e.what()).find("fill-in-the-middle"), std::string::npos) << e.what();
  }
}

// ---- stop strings -------------------------------------------------------------------------------

TEST(StopStrings, SpanningPiecesAndHoldBack) {
  StopStringMatcher m({"World", "xyz"});
  EXPECT_EQ(m.append("Hello W").text, "Hello ") << "'W' may start a stop string";
  EXPECT_EQ(m.append("or").text, "");
  const auto r = m.append("ld!");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.append("more").text.empty()) << "nothing after a stop";
  StopStringMatcher n({"World"});
  EXPECT_EQ(n.append("Wo").text, "");
  EXPECT_EQ(n.append("w").text, "Wow") << "no longer a prefix: released";
  EXPECT_EQ(n.append("W").text, "");
  EXPECT_EQ(n.finish(), "W") << "the end releases the held-back text";
  StopStringMatcher earliest({"cd", "bcd"});
  EXPECT_EQ(earliest.append("abcde").text, "a") << "the earliest match wins";
}

TEST(StopStrings, IncludeStopStringKeepsTheMatch) {
  StopStringMatcher m({"World", "xyz"}, /*include_stop=*/true);
  EXPECT_EQ(m.append("Hello W").text, "Hello ");
  const auto r = m.append("orld! more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "World") << "the stop string ends the text, nothing after it";
  StopStringMatcher earliest({"cd", "bcd"}, true);
  EXPECT_EQ(earliest.append("abcde").text, "abcd") << "the earliest match, whole";
  StopStringMatcher listed({"ab", "abc"}, true);
  EXPECT_EQ(listed.append("xabcd").text, "xab") << "of matches starting at one place, the one listed first";
}

TEST(StopStrings, WholeUtf8CharactersOnly) {
  StopStringMatcher m({});
  EXPECT_EQ(m.append("a\xC3").text, "a");
  EXPECT_EQ(m.append("\xA9").text, "\xC3\xA9");
  EXPECT_EQ(m.append("\xF0\x9F").text, "");
  EXPECT_EQ(m.append("\x98\x80!").text, "\xF0\x9F\x98\x80!");
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8_complete_prefix("\x80\x80"), 2u) << "stray continuation bytes pass through";
}

}  // namespace
}  // namespace pagedkv::api
