#include "pagedkv/router/stream_migration.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace pagedkv::router {
namespace {

using OJson = nlohmann::ordered_json;
using api::ApiEndpoint;

// Fields a continuation reproduces as they are (copied into its body).
constexpr std::array kCarried = {"model",
                                 "temperature",
                                 "top_p",
                                 "top_k",
                                 "min_p",
                                 "seed",
                                 "stop",
                                 "stop_token_ids",
                                 "ignore_eos",
                                 "repetition_penalty",
                                 "logit_bias",
                                 "skip_special_tokens",
                                 "include_stop_str_in_output",
                                 "spaces_between_special_tokens",
                                 "stream_options"};
// Fields that only shape the prompt, which the continuation receives as ids, or the limits it
// recomputes.
constexpr std::array kPromptOrLimits = {"messages",
                                        "prompt",
                                        "add_generation_prompt",
                                        "chat_template_kwargs",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "min_tokens",
                                        "stream",
                                        "user",
                                        "return_token_ids"};

bool is_listed(std::string_view key, auto const& list) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

// A field outside both lists is fine only at its neutral value (what the request means without it).
bool neutral(const std::string& key, const OJson& v) {
  if (v.is_null()) return true;
  if (key == "n" || key == "best_of") return v.is_number_integer() && v.get<int64_t>() == 1;
  if (key == "presence_penalty" || key == "frequency_penalty") return v.is_number() && v.get<double>() == 0.0;
  if (key == "logprobs" || key == "echo") return v.is_boolean() && !v.get<bool>();
  if (key == "response_format") return v.is_object() && v.value("type", "") == "text";
  if (key == "tool_choice") return v == "none";
  if (key == "tools" || key == "parallel_tool_calls") return true;  // inert unless tool_choice allows calls
  return false;
}

// Exactly one prompt: a string, token ids, or a list of one of those.
bool one_prompt(const OJson& p) {
  if (p.is_string()) return true;
  if (!p.is_array() || p.empty()) return false;
  return p[0].is_number_integer() || p.size() == 1;
}

std::vector<int64_t> ids_of(const OJson& v) {
  std::vector<int64_t> out;
  if (!v.is_array()) return out;
  for (const OJson& t : v)
    if (t.is_number_integer()) out.push_back(t.get<int64_t>());
  return out;
}

}  // namespace

std::unique_ptr<StreamMigration> StreamMigration::begin(const std::string& text, ApiEndpoint endpoint,
                                                        std::string& why) {
  OJson body = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    why = "the body is not a JSON object";
    return nullptr;
  }
  if (body.value("stream", false) != true) {
    why = "not streamed";
    return nullptr;
  }
  const bool tools_called = body.contains("tools") && !neutral("tool_choice", body.value("tool_choice", OJson("auto")));
  for (const auto& [key, value] : body.items()) {
    if (is_listed(key, kCarried) || is_listed(key, kPromptOrLimits)) continue;
    if (!neutral(key, value) || (key == "tools" && tools_called)) {
      why = fmt::format("'{}' carries state over the output", key);
      return nullptr;
    }
  }
  if (endpoint == ApiEndpoint::kCompletions && (!body.contains("prompt") || !one_prompt(body["prompt"]))) {
    why = "not exactly one prompt";
    return nullptr;
  }
  return std::unique_ptr<StreamMigration>(new StreamMigration(std::move(body), endpoint));
}

StreamMigration::StreamMigration(OJson body, ApiEndpoint endpoint) : body_(std::move(body)), endpoint_(endpoint) {
  client_wants_ids_ = body_.value("return_token_ids", false) == true;
  OJson upstream = body_;
  upstream["return_token_ids"] = true;
  upstream_body_ = upstream.dump();
}

bool StreamMigration::can_continue() const { return prompt_ids_.has_value() && !finished_ && !done_; }

bool StreamMigration::nothing_relayed() const { return id_.is_null() && !done_; }

std::string StreamMigration::restart_elsewhere() {
  buffer_.clear();
  ++migrations_;
  return upstream_body_;
}

std::string StreamMigration::continue_elsewhere() {
  buffer_.clear();
  ++migrations_;
  continuing_ = true;
  generated_at_switch_ = generated_.size();
  OJson c = OJson::object();
  for (const char* key : kCarried)
    if (body_.contains(key)) c[key] = body_[key];
  std::vector<int64_t> prompt = *prompt_ids_;
  prompt.insert(prompt.end(), generated_.begin(), generated_.end());
  c["prompt"] = prompt;
  const auto done = static_cast<int64_t>(generated_.size());
  const char* max_name = endpoint_ == ApiEndpoint::kChatCompletions && body_.contains("max_completion_tokens")
                             ? "max_completion_tokens"
                             : "max_tokens";
  if (body_.contains(max_name) && body_[max_name].is_number_integer())
    c["max_tokens"] = std::max<int64_t>(1, body_[max_name].get<int64_t>() - done);
  else if (endpoint_ == ApiEndpoint::kCompletions)
    c["max_tokens"] = std::max<int64_t>(1, 16 - done);  // the completions default
  // (chat without a limit: the rest of the context, which the continuation's default is too)
  if (body_.contains("min_tokens") && body_["min_tokens"].is_number_integer())
    c["min_tokens"] = std::max<int64_t>(0, body_["min_tokens"].get<int64_t>() - done);
  c["stream"] = true;
  c["return_token_ids"] = true;
  return c.dump();
}

std::string StreamMigration::relay(std::string_view bytes) {
  buffer_.append(bytes);
  std::string out;
  size_t start = 0;
  for (size_t end; (end = buffer_.find("\n\n", start)) != std::string::npos; start = end + 2)
    out += event(std::string_view(buffer_).substr(start, end - start));
  buffer_.erase(0, start);
  return out;
}

std::string StreamMigration::event(std::string_view text) {
  constexpr std::string_view kData = "data: ";
  if (text.substr(0, kData.size()) != kData) return std::string(text) + "\n\n";  // a comment (": ping")
  const std::string_view payload = text.substr(kData.size());
  if (payload == "[DONE]") {
    done_ = true;
    return "data: [DONE]\n\n";
  }
  OJson j = OJson::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.contains("error")) return std::string(text) + "\n\n";
  return chunk(std::move(j));
}

std::string StreamMigration::chunk(OJson j) {
  if (j.contains("prompt_token_ids")) {  // chat: on the chunk
    if (!prompt_ids_ && !continuing_) prompt_ids_ = ids_of(j["prompt_token_ids"]);
    if (!client_wants_ids_ || continuing_) j.erase("prompt_token_ids");
  }
  OJson* choice =
      j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() ? &j["choices"][0] : nullptr;
  std::vector<int64_t> new_ids;
  if (choice != nullptr) {
    if (choice->contains("prompt_token_ids")) {  // completions: on the choice
      if (!prompt_ids_ && !continuing_) prompt_ids_ = ids_of((*choice)["prompt_token_ids"]);
      if (!client_wants_ids_ || continuing_) choice->erase("prompt_token_ids");
    }
    if (choice->contains("token_ids")) {
      new_ids = ids_of((*choice)["token_ids"]);
      generated_.insert(generated_.end(), new_ids.begin(), new_ids.end());
      if (!client_wants_ids_) choice->erase("token_ids");
    }
    if (choice->contains("finish_reason") && !(*choice)["finish_reason"].is_null()) finished_ = true;
  }
  if (!continuing_) {
    if (id_.is_null()) {
      id_ = j.value("id", OJson());
      created_ = j.value("created", OJson());
      model_ = j.value("model", OJson());
    }
    return "data: " + j.dump() + "\n\n";
  }

  // A continuation's completions chunk, said as the client's stream.
  OJson out = OJson::object();
  out["id"] = id_;
  out["object"] = endpoint_ == ApiEndpoint::kChatCompletions ? "chat.completion.chunk" : "text_completion";
  out["created"] = created_;
  out["model"] = model_;
  OJson choices = OJson::array();
  if (choice != nullptr) {
    OJson c = OJson::object();
    c["index"] = 0;
    const std::string text = choice->value("text", "");
    if (endpoint_ == ApiEndpoint::kChatCompletions)
      c["delta"] = text.empty() ? OJson::object() : OJson{{"content", text}};
    else c["text"] = text;
    c["logprobs"] = nullptr;
    c["finish_reason"] = choice->value("finish_reason", OJson());
    if (client_wants_ids_) c["token_ids"] = new_ids;
    choices.push_back(std::move(c));
  }
  out["choices"] = std::move(choices);
  if (j.contains("usage") && j["usage"].is_object()) {
    // Counted from the client's request: its prompt, and every token generated for it.
    const int64_t prompt_tokens = prompt_ids_ ? static_cast<int64_t>(prompt_ids_->size()) : 0;
    const int64_t completion_tokens =
        static_cast<int64_t>(generated_at_switch_) + j["usage"].value("completion_tokens", int64_t{0});
    out["usage"] = {{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens}};
  }
  return "data: " + out.dump() + "\n\n";
}

}  // namespace pagedkv::router
