// The chat templates of pagedkv serve: how /v1/chat/completions (and /tokenize with messages)
// turn messages into a prompt.
//
// A GGUF file names its template in tokenizer.chat_template (a Jinja source). pagedkv does not run
// Jinja; it recognises the common templates by their distinctive markers and renders them itself:
//
//   llama-3  "<|start_header_id|>"   <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ...
//                                    then <|start_header_id|>assistant<|end_header_id|>\n\n
//   chatml   "<|im_start|>"          <|im_start|>ROLE\nCONTENT<|im_end|>\n ... then <|im_start|>assistant\n
//   gemma    "<start_of_turn>"       <start_of_turn>user\nCONTENT<end_of_turn>\n (assistant: "model"),
//                                    then <start_of_turn>model\n; system text opens the first user turn
//   llama-2  "[INST]"                [INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] ASSISTANT </s><s>[INST] ...
//
// (checked in this order). BOS is not written by the template: the tokenizer adds it as the
// vocabulary says (add_bos_token). The markers are special parts (the tokenizer turns them into
// their control tokens); message contents are plain text, so a user typing "<|im_end|>" gets the
// characters, not the token. llama-3 and gemma trim contents as their Jinja sources do. Roles:
// "developer" is "system"; llama-2 and gemma put all system messages, joined by blank lines, in
// the first user turn.
//
// Anything else (no template, an unrecognised one, llama2.c checkpoints) gets the default, a
// fixed plain-text template (docs/serve.md):
//
//     <system content>\n            for each "system" message
//     User: <content>\n             for each "user" message
//     Assistant: <content>\n        for each "assistant" message
//     Assistant:                    the generation prompt, always last
//
// tokenized with BOS first, like a completion prompt.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv::api {

struct ChatMessage {
  std::string role;  // system, developer (treated as system), user, assistant
  std::string content;  // text parts of a multi-part content array are concatenated
};

enum class ChatTemplate { kDefault, kLlama2, kLlama3, kChatml, kGemma };

// The template a tokenizer.chat_template source is (kDefault for "" or one not recognised).
ChatTemplate detect_chat_template(std::string_view jinja_source);
std::string_view chat_template_name(ChatTemplate t);  // "default", "llama-2", "llama-3", "chatml", "gemma"

// The prompt of `messages` in template `t`, ending with the assistant's generation prompt.
std::vector<PromptPart> render_chat(ChatTemplate t, std::span<const ChatMessage> messages);

// The default template's text (render_chat(kDefault, ...) as one string).
std::string render_chat_prompt(std::span<const ChatMessage> messages);

}  // namespace pagedkv::api
