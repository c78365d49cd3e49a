// The chat template of pagedkv serve. stories260K (and llama2.c checkpoints generally) carry no
// chat template, so the server renders messages with one fixed, documented plain-text template
// (docs/serve.md):
//
//     <system content>\n            for each "system" message
//     User: <content>\n             for each "user" message
//     Assistant: <content>\n        for each "assistant" message
//     Assistant:                    the generation prompt, always last
//
// The text is then tokenized with BOS first, like a completion prompt.
#pragma once

#include <span>
#include <string>

namespace pagedkv::server {

struct ChatMessage {
  std::string role;     // system, developer (treated as system), user, assistant
  std::string content;  // text parts of a multi-part content array are concatenated
};

std::string render_chat_prompt(std::span<const ChatMessage> messages);

}  // namespace pagedkv::server
