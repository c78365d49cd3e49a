#include "pagedkv/api/request_fields.h"

#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <string_view>

#include "pagedkv/api/api_error.h"

namespace pagedkv::api {
namespace {

using nlohmann::json;

enum class Support {
  kImplemented,  // parse_completion_request reads it
  kInformational,  // accepted and changes nothing here (identifiers, storage hints)
  kUnimplemented,  // refused unless neutral
};
constexpr unsigned kCompletionsOnly = 1, kChatOnly = 2, kBoth = 3;  // which endpoints a field belongs to

struct FieldRule {
  std::string_view name;
  unsigned endpoints;
  Support support;
  // Values that change nothing (null always does); for kUnimplemented only.
  std::vector<json> neutral = {};
};

const std::vector<FieldRule>& rules() {
  static const std::vector<FieldRule> kRules = [] {
    const json empty_list = json::array(), empty_object = json::object();
    return std::vector<FieldRule>{
        // OpenAI, both endpoints.
        {"model", kBoth, Support::kImplemented},
        {"max_tokens", kBoth, Support::kImplemented},
        {"temperature", kBoth, Support::kImplemented},
        {"top_p", kBoth, Support::kImplemented},
        {"n", kBoth, Support::kImplemented},
        {"seed", kBoth, Support::kImplemented},
        {"stop", kBoth, Support::kImplemented},
        {"stream", kBoth, Support::kImplemented},
        {"stream_options", kBoth, Support::kImplemented},
        {"logprobs", kBoth, Support::kImplemented},
        {"user", kBoth, Support::kInformational},
        {"frequency_penalty", kBoth, Support::kImplemented},
        {"presence_penalty", kBoth, Support::kImplemented},
        {"logit_bias", kBoth, Support::kImplemented},
        // OpenAI, completions.
        {"prompt", kCompletionsOnly, Support::kImplemented},
        {"echo", kBoth, Support::kImplemented},  // vLLM's chat takes it too (checked below)
        {"best_of", kCompletionsOnly, Support::kUnimplemented, {1}},
        {"suffix", kCompletionsOnly, Support::kImplemented},  // needs fill-in-the-middle tokens (prepare_request)
        // OpenAI, chat.
        {"messages", kChatOnly, Support::kImplemented},
        {"max_completion_tokens", kChatOnly, Support::kImplemented},
        {"top_logprobs", kChatOnly, Support::kImplemented},
        {"metadata", kChatOnly, Support::kInformational},
        {"store", kChatOnly, Support::kInformational},
        {"service_tier", kChatOnly, Support::kInformational},
        {"prompt_cache_key", kChatOnly, Support::kInformational},
        {"safety_identifier", kChatOnly, Support::kInformational},
        {"parallel_tool_calls", kChatOnly, Support::kImplemented},
        {"tools", kChatOnly, Support::kImplemented},
        {"tool_choice", kChatOnly, Support::kImplemented},
        {"functions", kChatOnly, Support::kUnimplemented, {empty_list}},
        {"function_call", kChatOnly, Support::kUnimplemented, {"none"}},
        {"response_format", kBoth, Support::kImplemented},
        {"audio", kChatOnly, Support::kUnimplemented},
        {"modalities", kChatOnly, Support::kUnimplemented, {json::array({"text"})}},
        {"prediction", kChatOnly, Support::kUnimplemented},
        {"web_search_options", kChatOnly, Support::kUnimplemented},
        {"reasoning_effort", kChatOnly, Support::kUnimplemented},
        {"verbosity", kChatOnly, Support::kUnimplemented},
        // vLLM's extensions (sampling parameters and the rest of its request schema).
        {"top_k", kBoth, Support::kImplemented},
        {"priority", kBoth, Support::kImplemented},
        {"cache_salt", kBoth, Support::kImplemented},
        {"ignore_eos", kBoth, Support::kImplemented},
        {"use_beam_search", kBoth, Support::kImplemented},
        {"request_id", kBoth, Support::kInformational},
        // pagedkv's extension: a per-request deadline in seconds (docs/serve.md).
        {"timeout", kBoth, Support::kImplemented},
        {"min_p", kBoth, Support::kImplemented},
        {"repetition_penalty", kBoth, Support::kImplemented},
        {"length_penalty", kBoth, Support::kUnimplemented, {1}},
        {"stop_token_ids", kBoth, Support::kImplemented},
        {"min_tokens", kBoth, Support::kImplemented},
        {"include_stop_str_in_output", kBoth, Support::kImplemented},
        {"skip_special_tokens", kBoth, Support::kImplemented},
        // Special tokens' text is joined with nothing between, whatever this says: vLLM's detokenizer
        // does the same for fast (tokenizers-library) tokenizers, where the flag changes nothing.
        {"spaces_between_special_tokens", kBoth, Support::kInformational},
        {"truncate_prompt_tokens", kBoth, Support::kUnimplemented},
        {"allowed_token_ids", kBoth, Support::kUnimplemented},
        {"bad_words", kBoth, Support::kUnimplemented, {empty_list}},
        {"prompt_logprobs", kBoth, Support::kImplemented},
        {"return_tokens_as_token_ids", kBoth, Support::kImplemented},
        {"return_token_ids", kBoth, Support::kImplemented},
        {"logits_processors", kBoth, Support::kUnimplemented},
        {"structured_outputs", kBoth, Support::kImplemented},
        {"guided_json", kBoth, Support::kImplemented},
        {"guided_regex", kBoth, Support::kImplemented},
        {"guided_choice", kBoth, Support::kImplemented},
        {"guided_grammar", kBoth, Support::kImplemented},
        {"guided_decoding_backend", kBoth, Support::kInformational},  // the backend is pagedkv's grammar layer
        {"guided_whitespace_pattern", kBoth, Support::kUnimplemented},
        {"add_special_tokens", kCompletionsOnly, Support::kUnimplemented, {true}},
        {"add_special_tokens", kChatOnly, Support::kUnimplemented, {false}},
        // Passed to the model's own chat template (the built-in renderings have no such switch).
        {"add_generation_prompt", kChatOnly, Support::kImplemented},
        {"continue_final_message", kChatOnly, Support::kUnimplemented, {false}},
        {"chat_template", kChatOnly, Support::kUnimplemented},
        {"chat_template_kwargs", kChatOnly, Support::kImplemented},
        {"documents", kChatOnly, Support::kUnimplemented},
        {"mm_processor_kwargs", kBoth, Support::kUnimplemented},
        {"kv_transfer_params", kBoth, Support::kUnimplemented},
        {"vllm_xargs", kBoth, Support::kUnimplemented},
    };
  }();
  return kRules;
}

unsigned endpoint_bit(ApiEndpoint e) { return e == ApiEndpoint::kChatCompletions ? kChatOnly : kCompletionsOnly; }

// JSON numbers compare by value (0 and 0.0 are both neutral).
bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

}  // namespace

void refuse_unimplemented_fields(const json& body, ApiEndpoint endpoint) {
  const unsigned bit = endpoint_bit(endpoint);
  for (const FieldRule& rule : rules()) {
    if (rule.support != Support::kUnimplemented || !(rule.endpoints & bit)) continue;
    const auto it = body.find(rule.name);
    if (it == body.end() || it->is_null()) continue;
    bool neutral = false;
    for (const json& n : rule.neutral) neutral = neutral || same_value(*it, n);
    // best_of equal to n asks for nothing beyond n (vLLM's default).
    if (rule.name == "best_of" && body.contains("n")) neutral = neutral || same_value(*it, body["n"]);
    if (neutral) continue;
    throw ApiError(400,
                   fmt::format("'{}' is not supported by this server (pagedkv does not implement it; "
                               "leave it out or set it to its default)",
                               rule.name),
                   std::string(rule.name), "unsupported_field");
  }
  // vLLM's chat accepts "echo" (the last message's content first); pagedkv does not.
  if (endpoint == ApiEndpoint::kChatCompletions) {
    const auto it = body.find("echo");
    if (it != body.end() && !it->is_null() && *it != false)
      throw ApiError(400, "'echo' is not supported for chat completions by this server", "echo", "unsupported_field");
  }
}

std::vector<std::string> unknown_fields(const json& body, ApiEndpoint endpoint) {
  const unsigned bit = endpoint_bit(endpoint);
  std::vector<std::string> out;
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    for (const FieldRule& rule : rules()) known = known || (rule.name == key && (rule.endpoints & bit));
    if (!known) out.push_back(key);
  }
  return out;
}

void report_unknown_fields_once(const std::vector<std::string>& names) {
  static std::mutex mutex;
  static std::set<std::string> reported;
  std::lock_guard lock(mutex);
  for (const std::string& name : names) {
    // Bounded: a client cannot grow the set (or the log) without limit with made-up names.
    if (reported.size() >= 256 || !reported.insert(name).second) continue;
    std::string shown = name.substr(0, 64);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // a log line stays one line
    std::fprintf(stderr, "pagedkv: ignoring request field '%s' (not part of OpenAI's or vLLM's request schema)\n",
                 shown.c_str());
  }
}

}  // namespace pagedkv::api
