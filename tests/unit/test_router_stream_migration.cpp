// StreamMigration's rules without processes: which requests may move, what the client sees of the
// ids the router asks for, the continuation request, and a continuation's chunks said as the
// client's endpoint (tests/python/test_router.py kills real instances mid-stream).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pagedkv/router/stream_migration.h"

namespace pagedkv::router {
namespace {

using api::ApiEndpoint;
using nlohmann::json;

std::unique_ptr<StreamMigration> begin(const json& body, ApiEndpoint endpoint = ApiEndpoint::kCompletions) {
  std::string why;
  auto m = StreamMigration::begin(body.dump(), endpoint, why);
  EXPECT_EQ(m == nullptr, !why.empty()) << why;
  return m;
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

TEST(StreamMigration, OnlyAnswersWhoseContinuationIsTheSameComputation) {
  const json plain = {{"prompt", "Once"}, {"stream", true}, {"max_tokens", 8}, {"temperature", 0}, {"seed", 3}};
  EXPECT_NE(begin(plain), nullptr);
  EXPECT_NE(begin({{"prompt", {"Once"}}, {"stream", true}, {"n", 1}, {"presence_penalty", 0}, {"logprobs", nullptr}}),
            nullptr);
  EXPECT_NE(begin({{"messages", json::array()},
                   {"stream", true},
                   {"tools", json::array()},
                   {"tool_choice", "none"},
                   {"response_format", {{"type", "text"}}}},
                  ApiEndpoint::kChatCompletions),
            nullptr);
  for (const json& refused :
       {json{{"prompt", "Once"}},  // not streamed
        json{{"prompt", "Once"}, {"stream", true}, {"n", 2}}, json{{"prompt", {"a", "b"}}, {"stream", true}},
        json{{"prompt", "Once"}, {"stream", true}, {"logprobs", 2}},
        json{{"prompt", "Once"}, {"stream", true}, {"echo", true}},
        json{{"prompt", "Once"}, {"stream", true}, {"frequency_penalty", 0.5}},
        json{{"prompt", "Once"}, {"stream", true}, {"structured_outputs", {{"regex", "a+"}}}},
        json{{"prompt", "Once"}, {"stream", true}, {"some_future_field", 1}}})
    EXPECT_EQ(begin(refused), nullptr) << refused.dump();
  EXPECT_EQ(begin({{"messages", json::array()}, {"stream", true}, {"tools", json::array({json::object()})}},
                  ApiEndpoint::kChatCompletions),
            nullptr);  // tool_choice auto: the output is parsed for calls
  EXPECT_EQ(begin({{"messages", json::array()}, {"stream", true}, {"response_format", {{"type", "json_object"}}}},
                  ApiEndpoint::kChatCompletions),
            nullptr);
}

TEST(StreamMigration, RecordsIdsTakesThemOutAndWaitsForWholeEvents) {
  auto m = begin({{"prompt", "Once"},
                  {"stream", true},
                  {"max_tokens", 10},
                  {"min_tokens", 4},
                  {"temperature", 0},
                  {"stop", {"x"}}});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(json::parse(m->upstream_body())["return_token_ids"], true);
  EXPECT_FALSE(m->can_continue());  // no ids yet
  const std::string first = sse({{"id", "cmpl-1"},
                                 {"object", "text_completion"},
                                 {"created", 5},
                                 {"model", "m"},
                                 {"choices",
                                  {{{"index", 0},
                                    {"text", " upon"},
                                    {"finish_reason", nullptr},
                                    {"prompt_token_ids", {1, 2}},
                                    {"token_ids", {7}}}}}});
  const std::string second =
      sse({{"id", "cmpl-1"}, {"choices", {{{"index", 0}, {"text", " a"}, {"token_ids", {8, 9}}}}}});
  // Split anywhere: nothing leaves before its event is whole.
  std::string out = m->relay(first.substr(0, 10));
  EXPECT_EQ(out, "");
  out = m->relay(first.substr(10) + second + ": ping\n\n" + "data: {\"id\": \"cmpl-1\", \"cho");
  EXPECT_EQ(out.find("token_ids"), std::string::npos) << out;
  EXPECT_NE(out.find("\" upon\""), std::string::npos);
  EXPECT_NE(out.find(": ping\n\n"), std::string::npos);
  EXPECT_TRUE(m->can_continue());
  EXPECT_EQ(m->generated_tokens(), 3u);

  const json c = json::parse(m->continue_elsewhere());  // the half event of the dead stream is dropped
  EXPECT_EQ(c["prompt"], json({1, 2, 7, 8, 9}));
  EXPECT_EQ(c["max_tokens"], 7);
  EXPECT_EQ(c["min_tokens"], 1);
  EXPECT_EQ(c["stop"], json({"x"}));
  EXPECT_EQ(c["temperature"], 0);
  EXPECT_EQ(c["stream"], true);
  EXPECT_FALSE(c.contains("min_p"));

  const std::string more =
      m->relay(sse({{"id", "cmpl-other"},
                    {"object", "text_completion"},
                    {"created", 9},
                    {"model", "m"},
                    {"choices",
                     {{{"index", 0},
                       {"text", " time"},
                       {"finish_reason", "length"},
                       {"prompt_token_ids", {1, 2, 7, 8, 9}},
                       {"token_ids", {10}}}}}}) +
               sse({{"id", "cmpl-other"},
                    {"choices", json::array()},
                    {"usage", {{"prompt_tokens", 5}, {"completion_tokens", 1}, {"total_tokens", 6}}}}) +
               "data: [DONE]\n\n");
  const size_t split = more.find("\n\n");
  const json chunk = json::parse(more.substr(6, split - 6));
  EXPECT_EQ(chunk["id"], "cmpl-1");  // the client's stream, not the continuation's
  EXPECT_EQ(chunk["created"], 5);
  EXPECT_EQ(chunk["choices"][0]["text"], " time");
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(chunk["choices"][0].contains("token_ids"));
  const size_t usage_start = split + 2 + 6;
  const json usage = json::parse(more.substr(usage_start, more.find("\n\n", usage_start) - usage_start))["usage"];
  EXPECT_EQ(usage, json({{"prompt_tokens", 2}, {"completion_tokens", 4}, {"total_tokens", 6}}));
  EXPECT_NE(more.find("data: [DONE]\n\n"), std::string::npos);
  EXPECT_FALSE(m->can_continue());
}

TEST(StreamMigration, ChatContinuationsAreChatChunksAndKeepIdsTheClientAskedFor) {
  auto m = begin({{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                  {"stream", true},
                  {"return_token_ids", true},
                  {"max_completion_tokens", 5}},
                 ApiEndpoint::kChatCompletions);
  ASSERT_NE(m, nullptr);
  const std::string out = m->relay(
      sse({{"id", "chatcmpl-1"},
           {"object", "chat.completion.chunk"},
           {"created", 1},
           {"model", "m"},
           {"prompt_token_ids", {3, 4}},
           {"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", "A"}}}, {"token_ids", {11}}}}}}));
  EXPECT_NE(out.find("\"prompt_token_ids\":[3,4]"), std::string::npos) << out;  // asked for: kept
  EXPECT_NE(out.find("\"token_ids\":[11]"), std::string::npos);
  const json c = json::parse(m->continue_elsewhere());
  EXPECT_EQ(c["prompt"], json({3, 4, 11}));
  EXPECT_EQ(c["max_tokens"], 4);
  EXPECT_FALSE(c.contains("messages"));
  const std::string more = m->relay(sse({{"id", "cmpl-9"},
                                         {"choices",
                                          {{{"index", 0},
                                            {"text", "B"},
                                            {"finish_reason", nullptr},
                                            {"prompt_token_ids", {3, 4, 11}},
                                            {"token_ids", {12}}}}}}));
  const json chunk = json::parse(more.substr(6, more.find("\n\n") - 6));
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["id"], "chatcmpl-1");
  EXPECT_EQ(chunk["choices"][0]["delta"], json({{"content", "B"}}));
  EXPECT_EQ(chunk["choices"][0]["token_ids"], json({12}));
  EXPECT_FALSE(chunk.contains("prompt_token_ids"));
}

}  // namespace
}  // namespace pagedkv::router
