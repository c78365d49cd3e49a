#include "pagedkv/server/chat_template.h"

namespace pagedkv::server {

std::string render_chat_prompt(std::span<const ChatMessage> messages) {
  std::string text;
  for (const ChatMessage& m : messages) {
    if (m.role == "system" || m.role == "developer") text += m.content + "\n";
    else if (m.role == "user") text += "User: " + m.content + "\n";
    else text += "Assistant: " + m.content + "\n";  // "assistant" (roles are validated when parsed)
  }
  return text + "Assistant:";
}

}  // namespace pagedkv::server
