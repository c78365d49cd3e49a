// The model file's own chat template (tokenizer.chat_template, or `pagedkv serve --chat-template
// FILE`), rendered by the template layer exactly as transformers renders it, instead of the
// hard-coded families of chat_template.h (which remain for models without one).
//
// The template sees what transformers passes: the request's messages and tools as sent (key order
// kept), add_generation_prompt, bos_token / eos_token (the vocabulary's texts), and the request's
// chat_template_kwargs (e.g. enable_thinking). The template prints BOS itself where the model wants
// it, so the rendering is tokenized without adding one. As with transformers and llama.cpp, the
// vocabulary's special tokens are recognised wherever the rendering has them: the markers the
// template prints ("<|im_start|>", "[INST]") become their tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedkv/model/tokenizer/text_tokenizer.h"
#include "pagedkv/template/template.h"

namespace pagedkv::api {

// A chat request's fields for the template, as the client sent them.
struct ChatTemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: the request has none
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
};

// The template fields of a request body already validated as JSON (messages, tools,
// add_generation_prompt, chat_template_kwargs); ApiError 400 for fields of the wrong type.
ChatTemplateInput parse_chat_template_input(std::string_view body);

class ModelChatTemplate {
 public:
  // Parses `source`; ConfigError if it does not parse. bos_token / eos_token: the vocabulary's
  // texts ("" when it has none).
  ModelChatTemplate(std::string_view source, std::string bos_token, std::string eos_token);

  // The prompt of a request: the rendering split into plain text and marker parts (the markers are
  // the special-token-like strings of the template's own text, and bos/eos). ApiError 400 when
  // the template fails: raise_exception's message as the template wrote it, or what went wrong.
  std::vector<PromptPart> render(const ChatTemplateInput& input) const;
  std::string render_text(const ChatTemplateInput& input) const;

  // Renders a one-message conversation; ConfigError naming the template's failure if it cannot.
  void check() const;

  // The special-token texts the template writes (its string literals that look like markers,
  // bos_token and eos_token), longest first: render() makes each one a special part.
  const std::vector<std::string>& markers() const { return markers_; }

 private:
  jinja::Template template_;
  std::string bos_token_, eos_token_;
  std::vector<std::string> markers_;  // longest first
};

}  // namespace pagedkv::api
