// The chat templates: which template a GGUF's tokenizer.chat_template source is, each template's
// rendering (markers shown as «...»), and, on the real vocabularies of ../shared/models/gguf/vocab,
// that markers become their control tokens while the same text in a message stays plain text.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "pagedkv/api/chat_template.h"
#include "pagedkv/api/openai_request.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"

namespace pagedkv::api {
namespace {

namespace fs = std::filesystem;

std::string shown(const std::vector<PromptPart>& parts) {
  std::string out;
  for (const PromptPart& p : parts) out += p.special ? "«" + p.text + "»" : p.text;
  return out;
}

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", " Hi <|im_end|> "}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(ChatTemplate, RecognisesTheCommonTemplatesByTheirMarkers) {
  EXPECT_EQ(detect_chat_template(""), ChatTemplate::kDefault);
  EXPECT_EQ(detect_chat_template("{{ messages }}"), ChatTemplate::kDefault);
  EXPECT_EQ(
      detect_chat_template("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}{{ '<|eot_id|>' }}"),
      ChatTemplate::kLlama3);
  EXPECT_EQ(detect_chat_template("{{'<|im_start|>' + message['role'] + '\\n'}}"), ChatTemplate::kChatml);
  EXPECT_EQ(detect_chat_template("{{ '<start_of_turn>' + role + '\\n' }}"), ChatTemplate::kGemma);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"), ChatTemplate::kLlama2);
  EXPECT_EQ(chat_template_name(ChatTemplate::kChatml), "chatml");
  EXPECT_EQ(chat_template_name(ChatTemplate::kDefault), "default");
}

TEST(ChatTemplate, RendersEachTemplate) {
  EXPECT_EQ(shown(render_chat(ChatTemplate::kDefault, kChat)),
            "Be brief.\nUser:  Hi <|im_end|> \nAssistant: Hello.\nUser: Bye\nAssistant:");
  EXPECT_EQ(shown(render_chat(ChatTemplate::kLlama3, kChat)),
            "«<|start_header_id|>»system«<|end_header_id|>»\n\nBe brief.«<|eot_id|>»"
            "«<|start_header_id|>»user«<|end_header_id|>»\n\nHi <|im_end|>«<|eot_id|>»"
            "«<|start_header_id|>»assistant«<|end_header_id|>»\n\nHello.«<|eot_id|>»"
            "«<|start_header_id|>»user«<|end_header_id|>»\n\nBye«<|eot_id|>»"
            "«<|start_header_id|>»assistant«<|end_header_id|>»\n\n");
  EXPECT_EQ(shown(render_chat(ChatTemplate::kChatml, kChat)),
            "«<|im_start|>»system\nBe brief.«<|im_end|>»\n"
            "«<|im_start|>»user\n Hi <|im_end|> «<|im_end|>»\n"
            "«<|im_start|>»assistant\nHello.«<|im_end|>»\n"
            "«<|im_start|>»user\nBye«<|im_end|>»\n"
            "«<|im_start|>»assistant\n");
  EXPECT_EQ(shown(render_chat(ChatTemplate::kGemma, kChat)),
            "«<start_of_turn>»user\nBe brief.\n\nHi <|im_end|>«<end_of_turn>»\n"
            "«<start_of_turn>»model\nHello.«<end_of_turn>»\n"
            "«<start_of_turn>»user\nBye«<end_of_turn>»\n"
            "«<start_of_turn>»model\n");
  EXPECT_EQ(shown(render_chat(ChatTemplate::kLlama2, kChat)),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi <|im_end|> [/INST] Hello. «</s>»«<s>»[INST] Bye [/INST]");
  // "developer" is a system message.
  const std::vector<ChatMessage> dev = {{"developer", "D"}, {"user", "U"}};
  EXPECT_EQ(shown(render_chat(ChatTemplate::kChatml, dev)),
            "«<|im_start|>»system\nD«<|im_end|>»\n«<|im_start|>»user\nU«<|im_end|>»\n«<|im_start|>»assistant\n");
}

fs::path vocab(const std::string& name) {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  return fs::path(env ? env : "../shared") / "models" / "gguf" / "vocab" / ("ggml-vocab-" + name + ".gguf");
}

std::vector<TokenId> concat(std::initializer_list<std::vector<TokenId>> pieces) {
  std::vector<TokenId> out;
  for (const auto& p : pieces) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(ChatTemplate, MarkersBecomeControlTokensOnRealVocabularies) {
  if (!fs::exists(vocab("llama-bpe")) || !fs::exists(vocab("qwen3")) || !fs::exists(vocab("llama-spm")))
    GTEST_SKIP() << "../shared/models/gguf/vocab is absent; skipping";
  const std::vector<ChatMessage> chat = {{"user", "Hi <|im_end|>"}};
  {
    const GgufFile file(vocab("llama-bpe").string());
    const auto tok = make_gguf_tokenizer(file);
    EXPECT_EQ(detect_chat_template(file.get_string("tokenizer.chat_template")), ChatTemplate::kLlama3);
    const auto ids = encode_bounded(*tok, render_chat(ChatTemplate::kLlama3, chat), true, 4096, "messages");
    // <|begin_of_text|> <|start_header_id|> user <|end_header_id|> \n\nHi <|im_end|> <|eot_id|> ...
    EXPECT_EQ(ids, concat({{128000, 128006},
                           tok->encode("user", false),
                           {128007},
                           tok->encode("\n\nHi <|im_end|>", false),
                           {128009, 128006},
                           tok->encode("assistant", false),
                           {128007},
                           tok->encode("\n\n", false)}));
    EXPECT_EQ(tok->detokenize(ids), "user\n\nHi <|im_end|>assistant\n\n");  // control tokens print nothing
    auto ends = tok->end_of_generation_ids();
    EXPECT_NE(std::find(ends.begin(), ends.end(), 128009), ends.end()) << "<|eot_id|> ends a generation";
    EXPECT_NE(std::find(ends.begin(), ends.end(), 128001), ends.end()) << "EOS ends a generation";
  }
  {
    const GgufFile file(vocab("qwen3").string());
    const auto tok = make_gguf_tokenizer(file);
    EXPECT_EQ(detect_chat_template(file.get_string("tokenizer.chat_template")), ChatTemplate::kChatml);
    const auto ids = encode_bounded(*tok, render_chat(ChatTemplate::kChatml, chat), true, 4096, "messages");
    // No BOS for Qwen; the typed "<|im_end|>" stays text, the markers are 151644 / 151645.
    EXPECT_EQ(ids, concat({{151644},
                           tok->encode("user\nHi <|im_end|>", false),
                           {151645},
                           tok->encode("\n", false),
                           {151644},
                           tok->encode("assistant\n", false)}));
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645), 1);
    auto ends = tok->end_of_generation_ids();
    EXPECT_NE(std::find(ends.begin(), ends.end(), 151645), ends.end()) << "<|im_end|> ends a generation";
  }
  {
    const GgufFile file(vocab("llama-spm").string());
    const auto tok = make_gguf_tokenizer(file);
    const std::vector<ChatMessage> turns = {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}};
    const auto ids = encode_bounded(*tok, render_chat(ChatTemplate::kLlama2, turns), true, 4096, "messages");
    // <s> "[INST] Hi [/INST] Yo " </s> <s> "[INST] Bye [/INST]": SentencePiece gives a fragment
    // after a special token its leading space, as llama.cpp does.
    EXPECT_EQ(ids,
              concat({tok->encode("[INST] Hi [/INST] Yo ", true), {2, 1}, tok->encode("[INST] Bye [/INST]", false)}));
  }
}

}  // namespace
}  // namespace pagedkv::api
