#include "pagedkv/api/model_chat_template.h"

#include <algorithm>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/api/api_error.h"
#include "pagedkv/api/json_text.h"
#include "pagedkv/api/tool_definitions.h"

namespace pagedkv::api {

namespace {

using nlohmann::ordered_json;

bool is_marker_char(char c) {
  return c != '<' && c != '>' && c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != '\'' && c != '"';
}

// The special-token-like strings of a template's source: <...> without spaces or quotes (<|im_start|>,
// <start_of_turn>, </s>, <｜Assistant｜>) and [UPPER_CASE] / [/UPPER_CASE] ([INST], [TOOL_CALLS]).
std::vector<std::string> find_markers(std::string_view source) {
  std::vector<std::string> found;
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '<') {
      size_t j = i + 1;
      while (j < source.size() && j - i <= 64 && is_marker_char(source[j])) ++j;
      if (j < source.size() && source[j] == '>' && j > i + 1) found.emplace_back(source.substr(i, j - i + 1));
    } else if (source[i] == '[') {
      size_t j = i + 1;
      if (j < source.size() && source[j] == '/') ++j;
      const size_t name_start = j;
      while (j < source.size() && j - i <= 32 && ((source[j] >= 'A' && source[j] <= 'Z') || source[j] == '_')) ++j;
      if (j < source.size() && source[j] == ']' && j >= name_start + 2) found.emplace_back(source.substr(i, j - i + 1));
    }
  }
  return found;
}

}  // namespace

ChatTemplateInput parse_chat_template_input(std::string_view body) {
  const ordered_json j = parse_json_in_order(body);
  ChatTemplateInput in;
  if (!j.is_object()) return in;
  if (auto it = j.find("messages"); it != j.end()) in.messages = messages_for_template(*it);
  if (auto it = j.find("tools"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw ApiError(400, "'tools' must be a list", "tools", "invalid_type");
    if (!it->empty()) in.tools = *it;
  }
  if (auto it = j.find("add_generation_prompt"); it != j.end()) {
    if (!it->is_boolean())
      throw ApiError(400, "'add_generation_prompt' must be a boolean", "add_generation_prompt", "invalid_type");
    in.add_generation_prompt = it->get<bool>();
  }
  if (auto it = j.find("chat_template_kwargs"); it != j.end() && !it->is_null()) {
    if (!it->is_object())
      throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs", "invalid_type");
    in.kwargs = *it;
  }
  return in;
}

ModelChatTemplate::ModelChatTemplate(std::string_view source, std::string bos_token, std::string eos_token)
    : template_([&] {
        try {
          return jinja::Template(source);
        } catch (const jinja::TemplateError& e) {
          throw ConfigError(fmt::format("the chat template does not parse: {}", e.what()));
        }
      }()),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      markers_(find_markers(source)) {
  for (const std::string* t : {&bos_token_, &eos_token_})
    if (!t->empty()) markers_.push_back(*t);
  std::sort(markers_.begin(), markers_.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  markers_.erase(std::unique(markers_.begin(), markers_.end()), markers_.end());
}

std::string ModelChatTemplate::render_text(const ChatTemplateInput& input) const {
  ordered_json vars = ordered_json::object();
  vars["messages"] = input.messages;
  vars["tools"] = input.tools;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = input.add_generation_prompt;
  vars["bos_token"] = bos_token_;
  vars["eos_token"] = eos_token_;
  for (const auto& [k, v] : input.kwargs.items()) vars[k] = v;
  try {
    return template_.render(vars);
  } catch (const jinja::TemplateRaisedError& e) {
    throw ApiError(400, e.what(), "messages", "chat_template_error");
  } catch (const jinja::TemplateError& e) {
    throw ApiError(400, fmt::format("the model's chat template failed on these messages: {}", e.what()), "messages",
                   "chat_template_error");
  }
}

std::vector<PromptPart> ModelChatTemplate::render(const ChatTemplateInput& input) const {
  const std::string text = render_text(input);
  std::vector<PromptPart> parts;
  size_t plain_start = 0;
  for (size_t i = 0; i < text.size();) {
    const std::string* hit = nullptr;
    if (text[i] == '<' || text[i] == '[' || (!bos_token_.empty() && text[i] == bos_token_[0]) ||
        (!eos_token_.empty() && text[i] == eos_token_[0])) {
      for (const std::string& m : markers_)
        if (text.compare(i, m.size(), m) == 0) {
          hit = &m;
          break;
        }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > plain_start) parts.push_back({text.substr(plain_start, i - plain_start), false});
    parts.push_back({*hit, true});
    i += hit->size();
    plain_start = i;
  }
  if (plain_start < text.size()) parts.push_back({text.substr(plain_start), false});
  return parts;
}

void ModelChatTemplate::check() const {
  ChatTemplateInput input;
  input.messages = ordered_json::array({{{"role", "user"}, {"content", "Hello"}}});
  try {
    render_text(input);
  } catch (const ApiError& e) {
    throw ConfigError(fmt::format("the model's chat template cannot render a one-message conversation: {}", e.what()));
  }
}

}  // namespace pagedkv::api
