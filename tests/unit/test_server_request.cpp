// The server's request handling without a server: parsing and validation of every bad input
// (status, field, message), the chat template, stop strings over split pieces, and the response
// shapes the ResponseBuilder assembles from engine updates.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "golden_support.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "pagedkv/server/api_error.h"
#include "pagedkv/server/openai_request.h"
#include "pagedkv/server/response_builder.h"
#include "pagedkv/server/stop_string_matcher.h"

namespace pagedkv::server {
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
  const CompletionRequest r = parse({{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 7}, {"temperature", 0.5},
                                     {"top_p", 0.9}, {"top_k", 5}, {"seed", 42}, {"n", 3}, {"stop", {"a", "bc"}},
                                     {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"echo", true},
                                     {"logprobs", 2}, {"priority", -1}, {"cache_salt", "t1"}, {"ignore_eos", true},
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
  const CompletionRequest r =
      parse({{"messages", {{{"role", "system"}, {"content", "S"}},
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
  EXPECT_EQ(parse({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"logprobs", true}}, ApiEndpoint::kChatCompletions).logprobs, 0);
  EXPECT_EQ(render_chat_prompt(r.messages), "S\nUser: ab\nAssistant:");
  const std::vector<ChatMessage> turns{{"user", "hi"}, {"assistant", "hello"}, {"developer", "be kind"}, {"user", "go"}};
  EXPECT_EQ(render_chat_prompt(turns), "User: hi\nAssistant: hello\nbe kind\nUser: go\nAssistant:");
}

TEST(ServerRequest, RejectsBadInput) {
  expect_rejected("{not json", "", "not valid JSON");
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
  expect_rejected(R"({"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", "stop",
                  "at most 16");
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
  expect_rejected(R"({"messages": [{"role": "tool", "content": "x"}]})", "messages", "unsupported message role", chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": 5}]})", "messages", "string or a list of text parts", chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages", "only text content", chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", "needs 'logprobs'", chat);
  expect_rejected(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 30})", "top_logprobs",
                  "between 0 and 20", chat);
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
  expect_api_error([] { parse_tokenize_request(R"({"prompt": "a", "add_special_tokens": 1})"); }, "add_special_tokens", "invalid_type");
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

// ---- with the stories260K tokenizer -------------------------------------------------------------

class ServerWithTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = testing::models_dir();
    if (dir.empty()) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models is absent (ctest sets it)";
    tokenizer_ = std::make_unique<Tokenizer>((dir / "tok512.bin").string(), 512);
  }
  ModelLimits limits() const { return {"stories260K", 512, 512}; }
  // The tokens that follow `prompt` when `text` (which starts with the prompt's text) is encoded.
  std::vector<TokenId> continuation(const std::vector<TokenId>& prompt, const std::string& text) const {
    std::vector<TokenId> all = tokenizer_->encode(text, true, false);
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), all.begin()));
    return {all.begin() + static_cast<ptrdiff_t>(prompt.size()), all.end()};
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

void expect_prepare_rejected(const CompletionRequest& r, const Tokenizer& t, const ModelLimits& m, const std::string& param,
                             const std::string& fragment) {
  try {
    prepare_request(r, t, m);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), param);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(ServerWithTokenizer, PreparesPrompts) {
  const auto p = prepare_request(parse({{"prompt", "Once upon a time"}}), *tokenizer_, limits());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].token_ids, (std::vector<TokenId>{1, 403, 407, 261, 378}));
  EXPECT_EQ(p[0].max_tokens, 16) << "OpenAI's completions default";
  const auto chat = prepare_request(parse({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, ApiEndpoint::kChatCompletions),
                                    *tokenizer_, limits());
  EXPECT_EQ(chat[0].token_ids, tokenizer_->encode("User: Hi\nAssistant:", true, false));
  EXPECT_EQ(chat[0].max_tokens, 512 - static_cast<int>(chat[0].token_ids.size())) << "chat: the rest of the context";
  const auto ids = prepare_request(parse({{"prompt", {5, 6}}, {"max_tokens", 510}}), *tokenizer_, limits());
  EXPECT_EQ(ids[0].token_ids, (std::vector<TokenId>{5, 6})) << "token prompts are used as given";
}

TEST_F(ServerWithTokenizer, RejectsWhatTheModelCannotServe) {
  expect_prepare_rejected(parse({{"prompt", "x"}, {"model", "gpt-4"}}), *tokenizer_, limits(), "model", "does not exist");
  expect_prepare_rejected(parse({{"prompt", {1, 512}}}), *tokenizer_, limits(), "prompt", "outside the vocabulary [0, 512)");
  expect_prepare_rejected(parse({{"prompt", {1, 2}}, {"max_tokens", 511}}), *tokenizer_, limits(), "max_tokens",
                          "maximum context length is 512 tokens; you requested 513 tokens (2 in the prompt, 511 for the completion)");
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += " a";
  expect_prepare_rejected(parse({{"prompt", long_text}}), *tokenizer_, limits(), "prompt", "leaving no room to generate");
  EXPECT_NO_THROW(prepare_request(parse({{"prompt", "x"}, {"model", "stories260K"}}), *tokenizer_, limits()));
}

// The llama2c tokenizer's encoding is quadratic in the text: 32K characters took 0.5 s here, the
// 8 MiB a body may hold would take hours. A text longer than max_model_len x the longest piece (tok512: 7 bytes) cannot
// fit whatever its tokens, and is refused before it is encoded.
TEST_F(ServerWithTokenizer, RefusesTextsTooLongToFitBeforeEncodingThem) {
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

// ---- responses ----------------------------------------------------------------------------------

ChoiceUpdate update(int choice, std::vector<TokenId> tokens, bool finished = false, FinishReason reason = FinishReason::kNone) {
  ChoiceUpdate u;
  u.choice = choice;
  u.engine_id = RequestId{static_cast<uint64_t>(100 + choice)};
  u.tokens = std::move(tokens);
  u.finished = finished;
  u.finish_reason = reason;
  return u;
}

std::vector<json> parsed(const std::vector<std::string>& chunks) {
  std::vector<json> out;
  for (const std::string& c : chunks) out.push_back(json::parse(c));
  return out;
}

TEST_F(ServerWithTokenizer, CompletionResponseAndChunks) {
  CompletionRequest req = parse({{"prompt", "Once upon a time"}, {"n", 2}, {"echo", true}, {"stream", true}});
  ResponseBuilder b(req, *tokenizer_, "cmpl-1", "stories260K", 1700000000, 1);
  const std::vector<TokenId> prompt{1, 403, 407, 261, 378};
  const std::vector<TokenId> out = continuation(prompt, "Once upon a time, there was");
  ChoiceUpdate first = update(0, {out[0]});
  first.first = true;
  first.prompt = prompt;
  first.cached_tokens = 0;
  const auto chunks = parsed(b.apply(first));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["object"], "text_completion");
  EXPECT_EQ(chunks[0]["id"], "cmpl-1");
  EXPECT_EQ(chunks[0]["created"], 1700000000);
  EXPECT_EQ(chunks[0]["model"], "stories260K");
  EXPECT_EQ(chunks[0]["choices"][0]["index"], 0);
  EXPECT_EQ(chunks[0]["choices"][0]["text"], "Once upon a time" + tokenizer_->render(std::vector<TokenId>{378, out[0]}));
  EXPECT_TRUE(chunks[0]["choices"][0]["finish_reason"].is_null());
  b.apply(update(0, std::vector<TokenId>(out.begin() + 1, out.end()), true, FinishReason::kLength));
  EXPECT_FALSE(b.done());
  ChoiceUpdate second = update(1, {}, true, FinishReason::kStop);
  second.first = true;
  second.prompt = prompt;
  b.apply(second);
  ASSERT_TRUE(b.done());
  const json r = b.response();
  EXPECT_EQ(r["choices"][0]["text"], "Once upon a time, there was");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][1]["text"], "Once upon a time");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 5) << "a prompt counts once, whatever n";
  EXPECT_EQ(r["usage"]["completion_tokens"], static_cast<int>(out.size()));
  EXPECT_EQ(json::parse(b.usage_chunk())["choices"].size(), 0u);
  EXPECT_EQ(json::parse(b.usage_chunk())["usage"], r["usage"]);
  // Not streaming: the same response, and no chunks built on the way.
  CompletionRequest whole_req = req;
  whole_req.stream = false;
  ResponseBuilder whole(whole_req, *tokenizer_, "cmpl-1", "stories260K", 1700000000, 1);
  EXPECT_TRUE(whole.apply(first).empty());
}

TEST_F(ServerWithTokenizer, StopStringEndsChoiceAndAsksEngineToStop) {
  CompletionRequest req = parse({{"prompt", "x"}, {"stop", "there"}});
  ResponseBuilder b(req, *tokenizer_, "cmpl-2", "m", 0, 1);
  const std::vector<TokenId> prompt{1, 403, 407, 261, 378};
  const std::vector<TokenId> out = continuation(prompt, "Once upon a time, there was a dog");
  ChoiceUpdate u = update(0, out);
  u.first = true;
  u.prompt = prompt;
  const auto chunks = b.apply(u);
  ASSERT_TRUE(b.done());
  EXPECT_EQ(b.response()["choices"][0]["text"], ", ");
  EXPECT_EQ(b.response()["choices"][0]["finish_reason"], "stop");
  const auto stops = b.take_stop_requests();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].value, 100u);
  EXPECT_TRUE(b.take_stop_requests().empty());
  EXPECT_TRUE(b.apply(update(0, {5}, true, FinishReason::kStop)).empty()) << "the engine's late end is ignored";
}

TEST_F(ServerWithTokenizer, ChatChunksAndLogprobs) {
  CompletionRequest req = parse({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"logprobs", true}, {"top_logprobs", 1},
                                 {"stream", true}},
                                ApiEndpoint::kChatCompletions);
  ResponseBuilder b(req, *tokenizer_, "chatcmpl-1", "m", 0, 1);
  ChoiceUpdate u = update(0, {403});
  u.first = true;
  u.prompt = {1, 5};
  u.logprobs.push_back(TokenLogprobs{{403, -0.5f}, {{403, -0.5f}}});
  const auto chunks = parsed(b.apply(u));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[0]["choices"][0]["logprobs"]["content"][0]["logprob"], -0.5f);
  const auto last = parsed(b.apply(update(0, {}, true, FinishReason::kAborted)));
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0]["choices"][0]["finish_reason"], "abort");
  EXPECT_TRUE(last[0]["choices"][0]["delta"].empty());
  const json r = b.response();
  EXPECT_EQ(r["choices"][0]["message"]["content"], std::string(Tokenizer::safe_piece(tokenizer_->decode(5, 403))));
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"].size(), 1u);
}

TEST_F(ServerWithTokenizer, RejectedRequestIsAnError) {
  CompletionRequest req = parse({{"prompt", "x"}});
  ResponseBuilder b(req, *tokenizer_, "cmpl-3", "m", 0, 1);
  ChoiceUpdate u = update(0, {}, true, FinishReason::kRejected);
  u.error = "too large";
  b.apply(u);
  EXPECT_TRUE(b.done());
  ASSERT_TRUE(b.error().has_value());
  EXPECT_EQ(*b.error(), "too large");
}

TEST_F(ServerWithTokenizer, Detokenize) {
  EXPECT_EQ(detokenize(*tokenizer_, std::vector<TokenId>{1, 403, 407}), "Once upon");
  EXPECT_EQ(detokenize(*tokenizer_, std::vector<TokenId>{403, 407}), " Once upon") << "no BOS: the first piece is printed";
  EXPECT_EQ(detokenize(*tokenizer_, std::vector<TokenId>{}), "");
}

}  // namespace
}  // namespace pagedkv::server
