// The model's own chat template in the server: request fields reaching the template (key order
// kept), raise_exception as a 400 with the template's message, the start-up dry render, and on the
// real vocabularies of ../shared/models/gguf/vocab, the rendering's markers becoming their tokens
// with no BOS added beyond what the template prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/api/api_error.h"
#include "pagedkv/api/model_chat_template.h"
#include "pagedkv/api/openai_request.h"

namespace pagedkv::api {
namespace {

namespace fs = std::filesystem;

fs::path vocab(const std::string& name) {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  return fs::path(env ? env : "../shared") / "models" / "gguf" / "vocab" / ("ggml-vocab-" + name + ".gguf");
}

TEST(ModelChatTemplate, RequestFieldsReachTheTemplate) {
  const std::string body = R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
        "function": {"name": "get_weather", "arguments": {"zeta": 1, "alpha": 2}}}]}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"z": 1, "a": 2}}}],
    "add_generation_prompt": false, "chat_template_kwargs": {"enable_thinking": false}})";
  // (parse_chat_template_input: the fields as the template sees them; tool calls' argument text
  // becomes an object there, tool_definitions.h.)
  const ChatTemplateInput input = parse_chat_template_input(body);
  const ModelChatTemplate t(
      "{{ tools[0].function.parameters|tojson }}|{{ messages[1].tool_calls[0].function.arguments|tojson }}|"
      "{{ enable_thinking }}|{{ add_generation_prompt }}|{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
      "<s>", "</s>");
  EXPECT_EQ(t.render_text(input), R"({"z": 1, "a": 2}|{"zeta": 1, "alpha": 2}|False|False|<s>Hi</s>)");
  const std::vector<PromptPart> parts = t.render(input);
  ASSERT_GE(parts.size(), 3u);
  EXPECT_EQ(parts.back().text, "</s>");
  EXPECT_TRUE(parts.back().special);

  // Without tools in the request, the template sees none (as transformers passes it).
  const CompletionRequest plain = parse_completion_request(R"({"messages": [{"role": "user", "content": "Hi"}]})",
                                                           ApiEndpoint::kChatCompletions, RequestLimits{});
  EXPECT_EQ(ModelChatTemplate("{{ tools is none }} {{ add_generation_prompt }}", "", "").render_text(plain.chat_input),
            "True True");
  EXPECT_THROW(parse_chat_template_input(R"({"messages": [{"role": "user", "content": "x"}], "tools": 3})"), ApiError);
}

TEST(ModelChatTemplate, TextPartsReachTheTemplateAsOneString) {
  // LangChain sends a message's content blocks as parts, a tool's result included; templates add
  // content to strings.
  const ChatTemplateInput input = parse_chat_template_input(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": [], "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "12:00"}]}]})");
  const ModelChatTemplate t("{% for m in messages %}[{{ m.role + ':' + m.content }}]{% endfor %}", "", "");
  EXPECT_EQ(t.render_text(input), "[user:Hi there][assistant:][tool:12:00]");
}

TEST(ModelChatTemplate, TemplateErrorsAre400s) {
  const ModelChatTemplate gemma_like(
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
      "{% for m in messages %}{{ m.content }}{% endfor %}",
      "<bos>", "<eos>");
  ChatTemplateInput in;
  in.messages =
      nlohmann::ordered_json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  try {
    gemma_like.render(in);
    FAIL() << "rendered";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_STREQ(e.what(), "System role not supported");
  }
  const ModelChatTemplate broken("{{ messages[0].content + 1 }}", "", "");
  try {
    broken.render(in);
    FAIL() << "rendered";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos) << e.what();
  }
}

TEST(ModelChatTemplate, StartUpChecksTheTemplate) {
  EXPECT_THROW(ModelChatTemplate("{% if %}", "", ""), ConfigError);
  // Hermes 3's tool-use template iterates tools, which are none without tools: it cannot serve chat.
  EXPECT_THROW(ModelChatTemplate("{% for t in tools %}{{ t }}{% endfor %}", "", "").check(), ConfigError);
  EXPECT_NO_THROW(ModelChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", "", "").check());
}

TEST(ModelChatTemplate, MarkersBecomeTokensOnRealVocabularies) {
  if (!fs::exists(vocab("qwen3")) || !fs::exists(vocab("llama-bpe")))
    GTEST_SKIP() << "../shared/models/gguf/vocab is absent; skipping";
  const ModelLimits limits{"m", 4096, 0};
  {
    const GgufFile file(vocab("qwen3").string());
    const auto tok = make_gguf_tokenizer(file);
    const ModelChatTemplate t(file.get_string("tokenizer.chat_template"), "", "<|im_end|>");
    t.check();
    CompletionRequest r = parse_completion_request(R"({"messages": [{"role": "user", "content": "Hi"}]})",
                                                   ApiEndpoint::kChatCompletions, RequestLimits{});
    const std::string text = t.render_text(r.chat_input);
    EXPECT_EQ(text.rfind("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", 0), 0u) << text;
    ModelLimits qwen = limits;
    qwen.vocab_size = tok->vocab_size();
    const auto prompts = prepare_request(r, *tok, qwen, ChatTemplate::kDefault, &t);
    ASSERT_EQ(prompts.size(), 1u);
    const auto& ids = prompts[0].token_ids;
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 151644);  // <|im_start|>
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645), 1);  // <|im_end|>
  }
  {
    const GgufFile file(vocab("llama-bpe").string());
    const auto tok = make_gguf_tokenizer(file);
    const auto* bpe = dynamic_cast<const GgufBpeTokenizer*>(tok.get());
    ASSERT_NE(bpe, nullptr);
    const ModelChatTemplate t(file.get_string("tokenizer.chat_template"), std::string(bpe->piece(tok->bos_id())),
                              std::string(bpe->piece(tok->eos_id())));
    t.check();
    CompletionRequest r = parse_completion_request(R"({"messages": [{"role": "user", "content": "Hi"}]})",
                                                   ApiEndpoint::kChatCompletions, RequestLimits{});
    ModelLimits llama = limits;
    llama.vocab_size = tok->vocab_size();
    const auto ids = prepare_request(r, *tok, llama, ChatTemplate::kDefault, &t)[0].token_ids;
    // The template prints <|begin_of_text|> itself; the server adds no second one.
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids[0], 128000);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);
    EXPECT_EQ(ids[1], 128006);  // <|start_header_id|>
  }
}

}  // namespace
}  // namespace pagedkv::api
