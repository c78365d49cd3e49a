// bench serve's token pool from servers that spell /tokenize differently: a stand-in for
// llama-server (reads only `content` and `add_special`) and one for vLLM and pagedkv (reads only
// `prompt` and `add_special_tokens`) give the same pool.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

#include "pagedkv/loadgen/serve_benchmark.h"

namespace pagedkv::loadgen {
namespace {

// Tokens of a text: one id per byte of it (ids 100 + byte % 7, so repeats), and 1 (BOS) first
// when special tokens are asked for.
std::vector<int> fake_tokens(const std::string& text, bool special) {
  std::vector<int> ids;
  if (special) ids.push_back(1);
  for (unsigned char c : text) ids.push_back(100 + c % 7);
  return ids;
}

TokenPool pool_from_server(const std::string& text_field, const std::string& special_field) {
  httplib::Server server;
  server.Post("/tokenize", [&](const httplib::Request& req, httplib::Response& res) {
    const nlohmann::json body = nlohmann::json::parse(req.body);
    const std::string text = body.value(text_field, std::string());
    const bool special = body.value(special_field, false);
    res.set_content(nlohmann::json{{"tokens", fake_tokens(text, special)}}.dump(), "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  TokenPool pool;
  try {
    pool = fetch_token_pool("http://127.0.0.1:" + std::to_string(port), "");
  } catch (...) {
    server.stop();
    serving.join();
    throw;
  }
  server.stop();
  serving.join();
  return pool;
}

TEST(TokenPool, LlamaServerAndOpenAiStyleTokenizeGiveTheSamePool) {
  const TokenPool llama_server = pool_from_server("content", "add_special");
  const TokenPool openai_style = pool_from_server("prompt", "add_special_tokens");
  EXPECT_EQ(llama_server.lead, std::vector<TokenId>{1});
  EXPECT_EQ(llama_server.ids, (std::vector<TokenId>{100, 101, 102, 103, 104, 105, 106}));  // sorted, distinct
  EXPECT_EQ(llama_server.ids, openai_style.ids);
  EXPECT_EQ(llama_server.lead, openai_style.lead);
}

}  // namespace
}  // namespace pagedkv::loadgen
