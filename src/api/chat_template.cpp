#include "pagedkv/api/chat_template.h"

namespace pagedkv::api {

namespace {

bool is_system(const ChatMessage& m) { return m.role == "system" || m.role == "developer"; }

// Jinja's trim: leading and trailing white space.
std::string trimmed(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

// Every system message's content, joined by blank lines (for templates with one system slot).
std::string system_text(std::span<const ChatMessage> messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (!is_system(m)) continue;
    if (!out.empty()) out += "\n\n";
    out += m.content;
  }
  return out;
}

struct Parts {
  std::vector<PromptPart> parts;
  void special(std::string_view s) { parts.push_back({std::string(s), true}); }
  void text(std::string_view s) {
    if (!parts.empty() && !parts.back().special) parts.back().text += s;
    else parts.push_back({std::string(s), false});
  }
};

std::vector<PromptPart> render_llama3(std::span<const ChatMessage> messages) {
  Parts p;
  for (const ChatMessage& m : messages) {
    p.special("<|start_header_id|>");
    p.text(is_system(m) ? "system" : m.role);
    p.special("<|end_header_id|>");
    p.text("\n\n");
    p.text(trimmed(m.content));
    p.special("<|eot_id|>");
  }
  p.special("<|start_header_id|>");
  p.text("assistant");
  p.special("<|end_header_id|>");
  p.text("\n\n");
  return p.parts;
}

std::vector<PromptPart> render_chatml(std::span<const ChatMessage> messages) {
  Parts p;
  for (const ChatMessage& m : messages) {
    p.special("<|im_start|>");
    p.text(is_system(m) ? "system" : m.role);
    p.text("\n");
    p.text(m.content);
    p.special("<|im_end|>");
    p.text("\n");
  }
  p.special("<|im_start|>");
  p.text("assistant\n");
  return p.parts;
}

std::vector<PromptPart> render_gemma(std::span<const ChatMessage> messages) {
  Parts p;
  std::string system = system_text(messages);
  for (const ChatMessage& m : messages) {
    if (is_system(m)) continue;
    const bool user = m.role == "user";
    p.special("<start_of_turn>");
    p.text(user ? "user\n" : "model\n");
    if (user && !system.empty()) {
      p.text(system);
      p.text("\n\n");
      system.clear();
    }
    p.text(trimmed(m.content));
    p.special("<end_of_turn>");
    p.text("\n");
  }
  p.special("<start_of_turn>");
  p.text("model\n");
  return p.parts;
}

std::vector<PromptPart> render_llama2(std::span<const ChatMessage> messages) {
  Parts p;
  std::string system = system_text(messages);
  bool first = true;
  for (const ChatMessage& m : messages) {
    if (is_system(m)) continue;
    if (m.role == "user") {
      if (!first) p.special("<s>");  // the first BOS is the tokenizer's
      std::string content;
      if (!system.empty()) {
        content.append("<<SYS>>\n").append(system).append("\n<</SYS>>\n\n");
        system.clear();
      }
      content += m.content;
      p.text("[INST] ");
      p.text(trimmed(content));
      p.text(" [/INST]");
    } else {
      p.text(" ");
      p.text(trimmed(m.content));
      p.text(" ");
      p.special("</s>");
    }
    first = false;
  }
  return p.parts;
}

}  // namespace

ChatTemplate detect_chat_template(std::string_view source) {
  if (source.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplate::kLlama3;
  if (source.find("<|im_start|>") != std::string_view::npos) return ChatTemplate::kChatml;
  if (source.find("<start_of_turn>") != std::string_view::npos) return ChatTemplate::kGemma;
  if (source.find("[INST]") != std::string_view::npos) return ChatTemplate::kLlama2;
  return ChatTemplate::kDefault;
}

std::string_view chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama2:
      return "llama-2";
    case ChatTemplate::kLlama3:
      return "llama-3";
    case ChatTemplate::kChatml:
      return "chatml";
    case ChatTemplate::kGemma:
      return "gemma";
    case ChatTemplate::kDefault:
      break;
  }
  return "default";
}

std::vector<PromptPart> render_chat(ChatTemplate t, std::span<const ChatMessage> messages) {
  switch (t) {
    case ChatTemplate::kLlama2:
      return render_llama2(messages);
    case ChatTemplate::kLlama3:
      return render_llama3(messages);
    case ChatTemplate::kChatml:
      return render_chatml(messages);
    case ChatTemplate::kGemma:
      return render_gemma(messages);
    case ChatTemplate::kDefault:
      break;
  }
  return {PromptPart{render_chat_prompt(messages), false}};
}

std::string render_chat_prompt(std::span<const ChatMessage> messages) {
  std::string text;
  for (const ChatMessage& m : messages) {
    if (is_system(m)) text += m.content + "\n";
    else if (m.role == "user") text += "User: " + m.content + "\n";
    else text += "Assistant: " + m.content + "\n";  // "assistant" (roles are validated when parsed)
  }
  return text + "Assistant:";
}

}  // namespace pagedkv::api
