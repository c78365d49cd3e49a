// The response shapes the ResponseBuilder assembles from engine updates: completion and chat
// objects and their streamed chunks, stop strings that end a choice, logprobs, errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "tok512_fixture.h"
#include "pagedkv/api/api_error.h"
#include "pagedkv/api/openai_request.h"
#include "pagedkv/api/tool_call_parser.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/server/response_builder.h"

namespace pagedkv::server {
namespace {

using api::ApiEndpoint;
using api::CompletionRequest;
using api::Tok512Fixture;
using nlohmann::json;

api::CompletionRequest parse(const json& body, api::ApiEndpoint e = api::ApiEndpoint::kCompletions) {
  return api::parse_completion_request(body.dump(), e, api::RequestLimits{});
}

// ---- responses ----------------------------------------------------------------------------------

ChoiceUpdate update(int choice, std::vector<TokenId> tokens, bool finished = false,
                    FinishReason reason = FinishReason::kNone) {
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

TEST_F(Tok512Fixture, CompletionResponseAndChunks) {
  api::CompletionRequest req = parse({{"prompt", "Once upon a time"}, {"n", 2}, {"echo", true}, {"stream", true}});
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
  EXPECT_EQ(chunks[0]["choices"][0]["text"],
            "Once upon a time" + tokenizer_->render(std::vector<TokenId>{378, out[0]}));
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
  api::CompletionRequest whole_req = req;
  whole_req.stream = false;
  ResponseBuilder whole(whole_req, *tokenizer_, "cmpl-1", "stories260K", 1700000000, 1);
  EXPECT_TRUE(whole.apply(first).empty());
}

TEST_F(Tok512Fixture, StopStringEndsChoiceAndAsksEngineToStop) {
  api::CompletionRequest req = parse({{"prompt", "x"}, {"stop", "there"}});
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

// The text of a whole response's choice `i` and of the same choice's streamed chunks.
std::string streamed_text(const std::vector<json>& chunks, int index, bool chat) {
  std::string text;
  for (const json& c : chunks)
    for (const json& choice : c["choices"])
      if (choice["index"] == index)
        text += chat ? choice["delta"].value("content", std::string()) : choice["text"].get<std::string>();
  return text;
}

TEST_F(Tok512Fixture, IncludeStopStringWholeAndStreamed) {
  const std::vector<TokenId> prompt{1, 403, 407, 261, 378};
  const std::vector<TokenId> out = continuation(prompt, "Once upon a time, there was a dog");
  for (const bool stream : {false, true})
    for (const bool include : {false, true}) {
      api::CompletionRequest req = parse(
          {{"prompt", "x"}, {"stop", {"the", "dog"}}, {"stream", stream}, {"include_stop_str_in_output", include}});
      ResponseBuilder b(req, *tokenizer_, "cmpl-2", "m", 0, 1);
      std::vector<json> chunks;
      for (size_t i = 0; i < out.size() && !b.done(); ++i) {  // token by token, as streamed
        ChoiceUpdate u = update(0, {out[i]});
        u.first = i == 0;
        u.prompt = prompt;
        for (json& c : parsed(b.apply(u))) chunks.push_back(std::move(c));
      }
      ASSERT_TRUE(b.done());
      const std::string expected = include ? ", the" : ", ";
      EXPECT_EQ(b.response()["choices"][0]["text"], expected) << include;
      EXPECT_EQ(b.response()["choices"][0]["finish_reason"], "stop");
      if (stream) {
        EXPECT_EQ(streamed_text(chunks, 0, false), expected) << include;
      }
    }
}

TEST_F(Tok512Fixture, ReturnTokenIdsWholeAndStreamed) {
  const std::vector<TokenId> prompt{1, 403, 407, 261, 378};
  const std::vector<TokenId> out = continuation(prompt, "Once upon a time, there was a dog");
  for (const auto endpoint : {api::ApiEndpoint::kCompletions, api::ApiEndpoint::kChatCompletions}) {
    const bool chat = endpoint == api::ApiEndpoint::kChatCompletions;
    json body = {{"return_token_ids", true}, {"n", 2}, {"stream", true}};
    if (chat) body["messages"] = {{{"role", "user"}, {"content", "Hi"}}};
    else body["prompt"] = "x";
    api::CompletionRequest req = parse(body, endpoint);
    ResponseBuilder b(req, *tokenizer_, "id", "m", 0, 1);
    std::vector<json> chunks;
    for (int choice = 0; choice < 2; ++choice)
      for (size_t i = 0; i < out.size(); ++i) {
        ChoiceUpdate u = update(choice, {out[i]}, i + 1 == out.size(), FinishReason::kLength);
        u.first = i == 0;
        u.prompt = prompt;
        for (json& c : parsed(b.apply(u))) chunks.push_back(std::move(c));
      }
    ASSERT_TRUE(b.done());
    const json r = b.response();
    for (int choice = 0; choice < 2; ++choice) {
      EXPECT_EQ(r["choices"][choice]["token_ids"], json(out)) << chat;
      json streamed_ids = json::array(), prompt_ids;
      int prompt_ids_seen = 0;
      for (const json& c : chunks) {
        if (c["choices"][0]["index"] != choice) continue;
        for (const json& id : c["choices"][0]["token_ids"]) streamed_ids.push_back(id);
        const json& holder = chat ? c : c["choices"][0];
        if (holder.contains("prompt_token_ids")) {
          prompt_ids = holder["prompt_token_ids"];
          ++prompt_ids_seen;
        }
      }
      EXPECT_EQ(streamed_ids, json(out)) << "the streamed deltas add up to the whole, chat " << chat;
      EXPECT_EQ(prompt_ids, json(prompt));
      EXPECT_EQ(prompt_ids_seen, 1) << "the prompt's ids come once per choice";
    }
    if (chat) EXPECT_EQ(r["prompt_token_ids"], json(prompt));
    else EXPECT_EQ(r["choices"][1]["prompt_token_ids"], json(prompt));
  }
  // Not asked: no such fields.
  api::CompletionRequest plain = parse({{"prompt", "x"}});
  ResponseBuilder b(plain, *tokenizer_, "id", "m", 0, 1);
  ChoiceUpdate u = update(0, out, true, FinishReason::kLength);
  u.first = true;
  u.prompt = prompt;
  b.apply(u);
  EXPECT_FALSE(b.response()["choices"][0].contains("token_ids"));
  EXPECT_FALSE(b.response()["choices"][0].contains("prompt_token_ids"));
}

TEST_F(Tok512Fixture, TokensAsTokenIdsInLogprobs) {
  for (const auto endpoint : {api::ApiEndpoint::kCompletions, api::ApiEndpoint::kChatCompletions}) {
    const bool chat = endpoint == api::ApiEndpoint::kChatCompletions;
    json body = {{"return_tokens_as_token_ids", true}};
    if (chat)
      body.update({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"logprobs", true}, {"top_logprobs", 2}});
    else body.update({{"prompt", "x"}, {"logprobs", 2}});
    api::CompletionRequest req = parse(body, endpoint);
    ResponseBuilder b(req, *tokenizer_, "id", "m", 0, 1);
    ChoiceUpdate u = update(0, {403}, true, FinishReason::kLength);
    u.first = true;
    u.prompt = {1, 5};
    u.logprobs.push_back(TokenLogprobs{{403, -0.5f}, {{403, -0.5f}, {17, -1.5f}}});
    b.apply(u);
    const json lp = b.response()["choices"][0]["logprobs"];
    if (chat) {
      EXPECT_EQ(lp["content"][0]["token"], "token_id:403");
      EXPECT_EQ(lp["content"][0]["top_logprobs"][1]["token"], "token_id:17");
      EXPECT_EQ(lp["content"][0]["bytes"].size(), std::string("token_id:403").size());
    } else {
      EXPECT_EQ(lp["tokens"][0], "token_id:403");
      EXPECT_EQ(lp["top_logprobs"][0]["token_id:17"], -1.5f);
    }
    EXPECT_NE(b.response()["choices"][0][chat ? "message" : "text"], json("")) << "the text itself stays text";
  }
}

TEST_F(Tok512Fixture, PromptLogprobsInVllmsShape) {
  const std::vector<TokenId> prompt{1, 403, 407};
  const std::vector<TokenLogprobs> entries{TokenLogprobs{{403, -0.25f}, {{403, -0.25f}, {385, -1.5f}}, 1},
                                           TokenLogprobs{{407, -3.0f}, {{383, -0.1f}, {261, -2.0f}}, 4}};
  for (const auto endpoint : {api::ApiEndpoint::kCompletions, api::ApiEndpoint::kChatCompletions}) {
    const bool chat = endpoint == api::ApiEndpoint::kChatCompletions;
    for (const bool stream : {false, true}) {
      json body = {{"prompt_logprobs", 2}, {"stream", stream}, {"n", 2}};
      if (chat) body["messages"] = {{{"role", "user"}, {"content", "Hi"}}};
      else body["prompt"] = "x";
      api::CompletionRequest req = parse(body, endpoint);
      ResponseBuilder b(req, *tokenizer_, "id", "m", 0, 1);
      std::vector<json> chunks;
      for (int choice = 0; choice < 2; ++choice) {
        ChoiceUpdate u = update(choice, {378}, true, FinishReason::kLength);
        u.first = true;
        u.prompt = prompt;
        if (choice == 0) u.prompt_logprobs = entries;  // sample 0's first update carries them
        for (json& c : parsed(b.apply(u))) chunks.push_back(std::move(c));
      }
      ASSERT_TRUE(b.done());
      const json expected = json::array(
          {nullptr,
           {{"403", {{"logprob", -0.25f}, {"rank", 1}, {"decoded_token", tokenizer_->decode_piece(1, 403)}}},
            {"385", {{"logprob", -1.5f}, {"rank", 2}, {"decoded_token", tokenizer_->decode_piece(1, 385)}}}},
           {{"383", {{"logprob", -0.1f}, {"rank", 1}, {"decoded_token", tokenizer_->decode_piece(403, 383)}}},
            {"261", {{"logprob", -2.0f}, {"rank", 2}, {"decoded_token", tokenizer_->decode_piece(403, 261)}}},
            {"407", {{"logprob", -3.0f}, {"rank", 4}, {"decoded_token", tokenizer_->decode_piece(403, 407)}}}}});
      const json r = b.response();
      if (chat) {
        EXPECT_EQ(r["prompt_logprobs"], expected);
      } else {
        EXPECT_EQ(r["choices"][0]["prompt_logprobs"], expected);
        EXPECT_EQ(r["choices"][1]["prompt_logprobs"], expected) << "every choice of the prompt";
      }
      if (!stream) continue;
      int carried = 0;
      for (const json& c : chunks) {
        const json& holder = chat ? c : c["choices"][0];
        if (!holder.contains("prompt_logprobs")) continue;
        EXPECT_EQ(holder["prompt_logprobs"], expected);
        ++carried;
      }
      EXPECT_EQ(carried, 2) << "once per choice, chat " << chat;
    }
  }
}

TEST(ResponseBuilderSpecialTokens, SkipSpecialTokensFalseKeepsControlTokens) {
  const auto dir = pagedkv::testing::models_dir();
  if (dir.empty()) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models is absent";
  GgufFile file((dir / "stories260Ktok512.gguf").string());
  const GgufTokenizer tokenizer(file);
  const TokenId eos = tokenizer.eos_id(), bos = tokenizer.bos_id();
  ASSERT_EQ(tokenizer.decode_piece(5, eos), "") << "a control token decodes to nothing";
  const std::vector<TokenId> prompt = tokenizer.encode("Once upon", true);
  const std::vector<TokenId> words = tokenizer.encode("a time", false);
  std::vector<TokenId> out = {words[0], eos, words[1], eos};
  for (const bool skip : {true, false}) {
    api::CompletionRequest req = parse({{"prompt", "x"}, {"skip_special_tokens", skip}, {"echo", true}});
    ResponseBuilder b(req, tokenizer, "id", "m", 0, 1);
    ChoiceUpdate u = update(0, out, true, FinishReason::kLength);
    u.first = true;
    u.prompt = prompt;
    b.apply(u);
    const std::string eos_text(tokenizer.piece(eos)), bos_text(tokenizer.piece(bos));
    const std::string expected = skip ? "Once upon a time"
                                      : bos_text + "Once upon" + tokenizer.decode_piece(prompt.back(), words[0]) +
                                            eos_text + tokenizer.decode_piece(eos, words[1]) + eos_text;
    EXPECT_EQ(b.response()["choices"][0]["text"], expected) << skip;
  }
}

TEST_F(Tok512Fixture, ChatChunksAndLogprobs) {
  api::CompletionRequest req = parse({{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                      {"logprobs", true},
                                      {"top_logprobs", 1},
                                      {"stream", true}},
                                     api::ApiEndpoint::kChatCompletions);
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

TEST_F(Tok512Fixture, RejectedRequestIsAnError) {
  api::CompletionRequest req = parse({{"prompt", "x"}});
  ResponseBuilder b(req, *tokenizer_, "cmpl-3", "m", 0, 1);
  ChoiceUpdate u = update(0, {}, true, FinishReason::kRejected);
  u.error = "too large";
  b.apply(u);
  EXPECT_TRUE(b.done());
  ASSERT_TRUE(b.error().has_value());
  EXPECT_EQ(*b.error(), "too large");
}

TEST_F(Tok512Fixture, Detokenize) {
  EXPECT_EQ(detokenize(*tokenizer_, std::vector<TokenId>{1, 403, 407}), "Once upon");
  EXPECT_EQ(detokenize(*tokenizer_, std::vector<TokenId>{403, 407}), " Once upon")
      << "no BOS: the first piece is printed";
  EXPECT_EQ(detokenize(*tokenizer_, std::vector<TokenId>{}), "");
}

// ---- tool calls -----------------------------------------------------------------------------

// A chat answer read for tool calls (hermes syntax), one token per update: the whole message and
// the streamed deltas as OpenAI's clients read them.
struct ToolAnswer {
  json response;
  std::vector<json> chunks;
};

ToolAnswer tool_answer(const Tokenizer& tokenizer, const std::string& output, bool stream, FinishReason end,
                       bool parallel = true) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
                     {"stream", stream},
                     {"parallel_tool_calls", parallel}};
  const CompletionRequest req = parse(body, ApiEndpoint::kChatCompletions);
  const auto parser = api::make_tool_call_parser("hermes");
  ResponseBuilder b(req, tokenizer, "chatcmpl-1", "m", 1, 1, parser.get(), 42);
  const std::vector<TokenId> tokens = tokenizer.encode(output, false, false);
  ToolAnswer a;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ChoiceUpdate u = update(0, {tokens[i]}, i + 1 == tokens.size(), i + 1 == tokens.size() ? end : FinishReason::kNone);
    if (i == 0) {
      u.first = true;
      u.prompt = {1};
    }
    for (json& c : parsed(b.apply(u))) a.chunks.push_back(std::move(c));
  }
  EXPECT_TRUE(b.done());
  a.response = b.response();
  return a;
}

TEST_F(Tok512Fixture, ToolCallsWholeAndStreamed) {
  const std::string output = "Sure.<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>";
  const json message = tool_answer(*tokenizer_, output, false, FinishReason::kStop).response["choices"][0]["message"];
  EXPECT_EQ(message["content"], "Sure.");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  const json& call = message["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "f");
  EXPECT_EQ(call["function"]["arguments"], R"({"a":1})");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(tool_answer(*tokenizer_, output, false, FinishReason::kStop).response["choices"][0]["finish_reason"],
            "tool_calls");

  const ToolAnswer streamed = tool_answer(*tokenizer_, output, true, FinishReason::kStop);
  std::string content;
  std::vector<json> call_deltas;
  for (const json& c : streamed.chunks) {
    const json& delta = c["choices"][0]["delta"];
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) call_deltas.push_back(delta["tool_calls"][0]);
  }
  EXPECT_EQ(content, "Sure.");  // the markup never streams as content
  ASSERT_EQ(call_deltas.size(), 2u);
  EXPECT_EQ(call_deltas[0]["index"], 0);
  EXPECT_TRUE(call_deltas[0].contains("id"));
  EXPECT_EQ(call_deltas[0]["type"], "function");
  EXPECT_EQ(call_deltas[0]["function"]["name"], "f");
  EXPECT_EQ(call_deltas[0]["function"]["arguments"], "");
  EXPECT_EQ(call_deltas[1]["index"], 0);
  EXPECT_FALSE(call_deltas[1].contains("id"));
  EXPECT_EQ(call_deltas[1]["function"]["arguments"], R"({"a":1})");
  EXPECT_EQ(streamed.chunks.back()["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(streamed.chunks.front()["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(Tok512Fixture, ParallelToolCallsFalseKeepsTheFirstCall) {
  const std::string call = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  for (const bool stream : {false, true}) {
    const ToolAnswer two = tool_answer(*tokenizer_, call + call, stream, FinishReason::kStop);
    EXPECT_EQ(two.response["choices"][0]["message"]["tool_calls"].size(), 2u);
    const ToolAnswer one = tool_answer(*tokenizer_, call + call + call, stream, FinishReason::kStop, false);
    EXPECT_EQ(one.response["choices"][0]["message"]["tool_calls"].size(), 1u);
    size_t streamed_calls = 0;
    for (const json& c : one.chunks)
      if (c["choices"][0]["delta"].contains("tool_calls") && c["choices"][0]["delta"]["tool_calls"][0].contains("id"))
        ++streamed_calls;
    EXPECT_EQ(streamed_calls, stream ? 1u : 0u);
    EXPECT_EQ(one.response["choices"][0]["message"]["content"], nullptr);  // the dropped calls are not text
  }
}

TEST_F(Tok512Fixture, ToolCallCutByLengthStaysText) {
  const std::string output = "<tool_call>{\"name\": \"f\", \"argu";
  const json choice = tool_answer(*tokenizer_, output, false, FinishReason::kLength).response["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_NE(choice["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
  // Plain text without calls: content as written (trimmed), finish_reason stop.
  const json plain = tool_answer(*tokenizer_, "Hello there", false, FinishReason::kStop).response["choices"][0];
  EXPECT_EQ(plain["message"]["content"], "Hello there");
  EXPECT_EQ(plain["finish_reason"], "stop");
}

}  // namespace
}  // namespace pagedkv::server
