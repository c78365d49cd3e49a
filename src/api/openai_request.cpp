#include "pagedkv/api/openai_request.h"
#include "pagedkv/api/request_fields.h"
#include "pagedkv/core/utf8.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "pagedkv/api/api_error.h"
#include "pagedkv/api/json_text.h"

namespace pagedkv::api {
namespace {

using nlohmann::json;

ApiError bad(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  return ApiError(400, message, param, code);
}

// A field that is absent or null is "not given": OpenAI's clients send null for unset options.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

int64_t integer(const json& v, const char* name) {
  if (!v.is_number_integer()) throw bad(name, fmt::format("'{}' must be an integer", name), "invalid_type");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw bad(name, fmt::format("'{}' is out of range", name));
  return v.get<int64_t>();
}

int integer_in(const json& v, const char* name, int64_t lo, int64_t hi) {
  const int64_t x = integer(v, name);
  if (x < lo || x > hi) throw bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return static_cast<int>(x);
}

double number(const json& v, const char* name) {
  if (!v.is_number()) throw bad(name, fmt::format("'{}' must be a number", name), "invalid_type");
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw bad(name, fmt::format("'{}' must be finite", name));
  return x;
}

bool boolean(const json& v, const char* name) {
  if (!v.is_boolean()) throw bad(name, fmt::format("'{}' must be a boolean", name), "invalid_type");
  return v.get<bool>();
}

std::string string(const json& v, const char* name) {
  if (!v.is_string()) throw bad(name, fmt::format("'{}' must be a string", name), "invalid_type");
  return v.get<std::string>();
}

std::vector<TokenId> token_ids(const json& v, const char* name) {
  std::vector<TokenId> ids;
  ids.reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer())
      throw bad(
          name,
          fmt::format("'{}' must be a string, a list of strings, a list of token ids or a list of lists of token ids",
                      name),
          "invalid_type");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<TokenId>::max())
      throw bad(name, fmt::format("token id {} in '{}' is outside the vocabulary", id, name), "invalid_token_id");
    ids.push_back(static_cast<TokenId>(id));
  }
  if (ids.empty()) throw bad(name, fmt::format("'{}' holds an empty list of token ids", name));
  return ids;
}

std::vector<PromptInput> parse_prompts(const json& p, const RequestLimits& limits) {
  std::vector<PromptInput> prompts;
  if (p.is_string()) {
    prompts.push_back({true, p.get<std::string>(), {}});
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    prompts.push_back({false, {}, token_ids(p, "prompt")});
  } else if (p.is_array() && !p.empty()) {
    for (const json& e : p) {
      if (e.is_string()) prompts.push_back({true, e.get<std::string>(), {}});
      else if (e.is_array()) prompts.push_back({false, {}, token_ids(e, "prompt")});
      else
        throw bad("prompt",
                  "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids",
                  "invalid_type");
    }
  } else if (p.is_array()) {
    throw bad("prompt", "'prompt' must not be an empty list");
  } else {
    throw bad("prompt",
              "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids",
              "invalid_type");
  }
  if (static_cast<int>(prompts.size()) > limits.max_prompts)
    throw bad("prompt", fmt::format("at most {} prompts per request, got {}", limits.max_prompts, prompts.size()));
  return prompts;
}

std::string message_content(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {  // [{"type": "text", "text": ...}, ...]
    std::string text;
    for (const json& part : c) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        throw bad("messages", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                  "unsupported_content");
      text += part["text"].get<std::string>();
    }
    return text;
  }
  throw bad("messages", "a message's 'content' must be a string or a list of text parts", "invalid_type");
}

std::vector<ChatMessage> parse_messages(const json& m) {
  if (!m.is_array() || m.empty()) throw bad("messages", "'messages' must be a non-empty list", "invalid_type");
  std::vector<ChatMessage> messages;
  for (const json& e : m) {
    if (!e.is_object())
      throw bad("messages", "each message must be an object with 'role' and 'content'", "invalid_type");
    const json* role = field(e, "role");
    if (role == nullptr || !role->is_string())
      throw bad("messages", "each message needs a string 'role'", "invalid_type");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      throw bad("messages", fmt::format("unsupported message role '{}' (system, developer, user, assistant, tool)", r));
    const json* content = field(e, "content");
    messages.push_back({r, content == nullptr ? std::string() : message_content(*content)});
  }
  return messages;
}

// The structured-output fields are read from the body parsed again keeping its key order: a
// schema's `properties` are generated in the order the client wrote them.
using ojson = nlohmann::ordered_json;

const ojson* field(const ojson& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// A JSON Schema given as an object (or a boolean schema), or as a string holding one.
std::string schema_text(const ojson& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    const ojson parsed = parse_json_in_order(v.get<std::string>());
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
      throw bad(param, fmt::format("'{}' must be a JSON Schema (an object, or a string holding one)", param),
                "invalid_type");
    return parsed.dump();
  }
  throw bad(param, fmt::format("'{}' must be a JSON Schema (an object, or a string holding one)", param),
            "invalid_type");
}

std::string choice_text(const ojson& v, const std::string& param) {
  if (!v.is_array() || v.empty())
    throw bad(param, fmt::format("'{}' must be a non-empty list of strings", param), "invalid_type");
  for (const ojson& c : v)
    if (!c.is_string())
      throw bad(param, fmt::format("'{}' must be a non-empty list of strings", param), "invalid_type");
  return v.dump();
}

std::string text_field(const ojson& v, const std::string& param) {
  if (!v.is_string()) throw bad(param, fmt::format("'{}' must be a string", param), "invalid_type");
  return v.get<std::string>();
}

// OpenAI's response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {...}}.
std::optional<StructuredOutputRequest> parse_response_format(const ojson& v) {
  const std::string param = "response_format";
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    throw bad(param, "'response_format' must be an object with a 'type' (\"text\", \"json_object\" or \"json_schema\")",
              "invalid_type");
  const std::string type = v["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return StructuredOutputRequest{grammar::GrammarKind::kJsonObject, "", param};
  if (type == "json_schema") {
    const ojson* spec = field(v, "json_schema");
    if (spec == nullptr || !spec->is_object())
      throw bad(param, "'response_format.json_schema' must be an object holding 'name' and 'schema'", "invalid_type");
    const ojson* schema = field(*spec, "schema");
    if (schema == nullptr) throw bad(param, "'response_format.json_schema.schema' is required", "missing_field");
    if (const ojson* strict = field(*spec, "strict"); strict != nullptr && !strict->is_boolean())
      throw bad(param, "'response_format.json_schema.strict' must be a boolean", "invalid_type");
    return StructuredOutputRequest{grammar::GrammarKind::kJsonSchema,
                                   schema_text(*schema, "response_format.json_schema.schema"), param};
  }
  throw bad(param,
            fmt::format("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"",
                        type.substr(0, 32)));
}

// vLLM's structured_outputs: exactly one of json, regex, choice, grammar, json_object.
StructuredOutputRequest parse_structured_outputs(const ojson& v) {
  const std::string param = "structured_outputs";
  if (!v.is_object()) throw bad(param, "'structured_outputs' must be an object", "invalid_type");
  std::optional<StructuredOutputRequest> out;
  auto set = [&](grammar::GrammarKind kind, std::string text, const char* name) {
    if (out)
      throw bad(param,
                fmt::format("'structured_outputs' takes exactly one of json, regex, choice, grammar, json_object; "
                            "got more ('{}')",
                            name));
    out = StructuredOutputRequest{kind, std::move(text), param};
  };
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    if (key == "json") set(grammar::GrammarKind::kJsonSchema, schema_text(value, "structured_outputs.json"), "json");
    else if (key == "regex") set(grammar::GrammarKind::kRegex, text_field(value, "structured_outputs.regex"), "regex");
    else if (key == "choice")
      set(grammar::GrammarKind::kChoice, choice_text(value, "structured_outputs.choice"), "choice");
    else if (key == "grammar")
      set(grammar::GrammarKind::kGbnf, text_field(value, "structured_outputs.grammar"), "grammar");
    else if (key == "json_object") {
      if (value != true) throw bad(param, "'structured_outputs.json_object' must be true when given", "invalid_value");
      set(grammar::GrammarKind::kJsonObject, "", "json_object");
    }
    // Options pagedkv's grammars already behave by (compact JSON, no properties beyond the
    // schema's) or that choose an implementation.
    else if (key == "disable_fallback" || key == "disable_any_whitespace" || key == "disable_additional_properties" ||
             key == "backend")
      continue;
    else
      throw bad(param, fmt::format("'structured_outputs.{}' is not supported by this server", key.substr(0, 64)),
                "unsupported_field");
  }
  if (!out)
    throw bad(param, "'structured_outputs' needs one of json, regex, choice, grammar, json_object", "missing_field");
  return *out;
}

// The request's structured-output field, if any: at most one of them (400 naming the second).
std::optional<StructuredOutputRequest> parse_structured_output(const ojson& j) {
  std::optional<StructuredOutputRequest> out;
  auto take = [&](std::optional<StructuredOutputRequest> s, const char* name) {
    if (!s) return;
    if (out)
      throw bad(name, fmt::format("'{}' and '{}' both ask for structured output; give at most one", out->param, name),
                "conflicting_fields");
    out = std::move(s);
  };
  if (const ojson* v = field(j, "response_format")) take(parse_response_format(*v), "response_format");
  if (const ojson* v = field(j, "structured_outputs")) take(parse_structured_outputs(*v), "structured_outputs");
  if (const ojson* v = field(j, "guided_json"))
    take(StructuredOutputRequest{grammar::GrammarKind::kJsonSchema, schema_text(*v, "guided_json"), "guided_json"},
         "guided_json");
  if (const ojson* v = field(j, "guided_regex"))
    take(StructuredOutputRequest{grammar::GrammarKind::kRegex, text_field(*v, "guided_regex"), "guided_regex"},
         "guided_regex");
  if (const ojson* v = field(j, "guided_choice"))
    take(StructuredOutputRequest{grammar::GrammarKind::kChoice, choice_text(*v, "guided_choice"), "guided_choice"},
         "guided_choice");
  if (const ojson* v = field(j, "guided_grammar"))
    take(StructuredOutputRequest{grammar::GrammarKind::kGbnf, text_field(*v, "guided_grammar"), "guided_grammar"},
         "guided_grammar");
  return out;
}

json parse_object(std::string_view body) {
  if (nests_deeper_than(body, kMaxJsonDepth))
    throw ApiError(400,
                   fmt::format("the request body nests arrays and objects more than {} levels deep", kMaxJsonDepth), "",
                   "invalid_json");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // JSON text is UTF-8 (RFC 8259): say so rather than "not JSON" when that is what broke it.
    if (const size_t at = first_invalid_utf8(body); at != std::string_view::npos)
      throw ApiError(400, fmt::format("the request body is not valid UTF-8 (byte {} of {})", at, body.size()), "",
                     "invalid_utf8");
    throw ApiError(400, "the request body is not valid JSON", "", "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  return j;
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, ApiEndpoint endpoint, const RequestLimits& limits) {
  const json j = parse_object(body);
  refuse_unimplemented_fields(j, endpoint);
  report_unknown_fields_once(unknown_fields(j, endpoint));

  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == ApiEndpoint::kChatCompletions;
  if (const json* v = field(j, "model")) r.model = string(*v, "model");
  if (chat) {
    const json* m = field(j, "messages");
    if (m == nullptr) throw bad("messages", "'messages' is required", "missing_field");
    r.messages = parse_messages(*m);
    r.chat_input = parse_chat_template_input(body);
    r.tools = parse_tool_request(parse_json_in_order(body));
  } else {
    const json* p = field(j, "prompt");
    if (p == nullptr) throw bad("prompt", "'prompt' is required", "missing_field");
    r.prompts = parse_prompts(*p, limits);
  }
  // Chat's newer name for max_tokens wins when both are given.
  const char* max_name = chat && field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const json* v = field(j, max_name)) r.max_tokens = integer_in(*v, max_name, 1, std::numeric_limits<int>::max());
  if (const json* v = field(j, "temperature")) {
    r.temperature = static_cast<float>(number(*v, "temperature"));
    if (r.temperature < 0) throw bad("temperature", "'temperature' must be at least 0");
  }
  if (const json* v = field(j, "top_p")) {
    const double p = number(*v, "top_p");
    if (!(p > 0 && p <= 1)) throw bad("top_p", fmt::format("'top_p' must be in (0, 1], got {}", p));
    r.top_p = static_cast<float>(p);
  }
  if (const json* v = field(j, "top_k")) {
    r.top_k = integer_in(*v, "top_k", -1, std::numeric_limits<int>::max());
    if (r.top_k < 0) r.top_k = 0;
  }
  if (const json* v = field(j, "min_p")) {
    const double p = number(*v, "min_p");
    if (!(p >= 0 && p <= 1)) throw bad("min_p", fmt::format("'min_p' must be in [0, 1], got {}", p));
    r.min_p = static_cast<float>(p);
  }
  for (const auto& [name, out] :
       {std::pair{"presence_penalty", &r.presence_penalty}, std::pair{"frequency_penalty", &r.frequency_penalty}})
    if (const json* v = field(j, name)) {
      const double p = number(*v, name);
      if (!(p >= -2 && p <= 2)) throw bad(name, fmt::format("'{}' must be between -2 and 2, got {}", name, p));
      *out = static_cast<float>(p);
    }
  if (const json* v = field(j, "repetition_penalty")) {
    const double p = number(*v, "repetition_penalty");
    if (!(p > 0 && p <= 100))
      throw bad("repetition_penalty", fmt::format("'repetition_penalty' must be in (0, 100], got {}", p));
    r.repetition_penalty = static_cast<float>(p);
  }
  if (const json* v = field(j, "logit_bias"); v != nullptr && !v->is_null()) {
    if (!v->is_object())
      throw bad("logit_bias", "'logit_bias' must be an object of token ids to biases", "invalid_type");
    if (v->size() > static_cast<size_t>(limits.max_logit_bias))
      throw bad("logit_bias", fmt::format("at most {} logit_bias entries, got {}", limits.max_logit_bias, v->size()));
    for (const auto& [key, value] : v->items()) {
      TokenId id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0)
        throw bad("logit_bias", fmt::format("logit_bias keys are token ids, got '{}'", key.substr(0, 32)),
                  "invalid_type");
      const double bias = number(value, "logit_bias");
      if (!(bias >= -100 && bias <= 100))
        throw bad("logit_bias", fmt::format("a logit bias must be between -100 and 100, got {}", bias));
      r.logit_bias.emplace_back(id, static_cast<float>(bias));
    }
    std::sort(r.logit_bias.begin(), r.logit_bias.end());
  }
  if (const json* v = field(j, "stop_token_ids"); v != nullptr && !v->is_null()) {
    if (!v->is_array()) throw bad("stop_token_ids", "'stop_token_ids' must be a list of token ids", "invalid_type");
    if (static_cast<int>(v->size()) > limits.max_stop_strings * 4)
      throw bad("stop_token_ids", fmt::format("at most {} stop_token_ids", limits.max_stop_strings * 4));
    for (const json& t : *v)
      r.stop_token_ids.push_back(integer_in(t, "stop_token_ids", 0, std::numeric_limits<TokenId>::max()));
  }
  if (const json* v = field(j, "min_tokens"))
    r.min_tokens = integer_in(*v, "min_tokens", 0, std::numeric_limits<int>::max());
  if (r.max_tokens && r.min_tokens > *r.max_tokens)
    throw bad("min_tokens",
              fmt::format("'min_tokens' ({}) must not exceed the maximum tokens ({})", r.min_tokens, *r.max_tokens));
  if (const json* v = field(j, "seed")) r.seed = static_cast<uint64_t>(integer(*v, "seed"));
  if (const json* v = field(j, "n")) r.n = integer_in(*v, "n", 1, limits.max_n);
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& s : *v) r.stop.push_back(string(s, "stop"));
    } else {
      throw bad("stop", "'stop' must be a string or a list of strings", "invalid_type");
    }
    if (static_cast<int>(r.stop.size()) > limits.max_stop_strings)
      throw bad("stop", fmt::format("at most {} stop strings, got {}", limits.max_stop_strings, r.stop.size()));
    for (const std::string& s : r.stop)
      if (s.empty()) throw bad("stop", "stop strings must not be empty");
  }
  for (const auto& [name, out] :
       {std::pair{"include_stop_str_in_output", &r.include_stop_str_in_output},
        std::pair{"skip_special_tokens", &r.skip_special_tokens}, std::pair{"return_token_ids", &r.return_token_ids},
        std::pair{"return_tokens_as_token_ids", &r.return_tokens_as_token_ids}})
    if (const json* v = field(j, name)) *out = boolean(*v, name);
  if (const json* v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(j, "timeout")) {
    const double seconds = number(*v, "timeout");
    if (!(seconds > 0 && seconds <= 1e6))
      throw bad("timeout", fmt::format("'timeout' must be in (0, 1e6] seconds, got {}", seconds));
    r.timeout = std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1e3))));
  }
  if (const json* v = field(j, "stream_options")) {
    if (!r.stream) throw bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (!v->is_object()) throw bad("stream_options", "'stream_options' must be an object", "invalid_type");
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (chat) {
    const bool want = field(j, "logprobs") ? boolean(*field(j, "logprobs"), "logprobs") : false;
    if (const json* v = field(j, "top_logprobs")) {
      if (!want) throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      r.logprobs = integer_in(*v, "top_logprobs", 0, limits.max_logprobs);
    } else if (want) {
      r.logprobs = 0;
    }
  } else {
    if (const json* v = field(j, "echo")) r.echo = boolean(*v, "echo");
    if (const json* v = field(j, "suffix")) r.suffix = string(*v, "suffix");
    if (const json* v = field(j, "logprobs")) r.logprobs = integer_in(*v, "logprobs", 0, limits.max_logprobs);
  }
  if (const json* v = field(j, "priority"))
    r.priority = integer_in(*v, "priority", std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
  if (const json* v = field(j, "cache_salt")) {
    r.cache_salt = string(*v, "cache_salt");
    if (r.cache_salt.empty()) throw bad("cache_salt", "'cache_salt' must not be empty when given");
  }
  if (const json* v = field(j, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(j, "use_beam_search")) r.use_beam_search = boolean(*v, "use_beam_search");
  if (r.use_beam_search && r.stream)
    throw bad("use_beam_search", "beam search does not stream: its hypotheses are known only at the end");
  if (r.use_beam_search && r.logprobs >= 0) throw bad("use_beam_search", "beam search does not return logprobs");
  if (const json* v = field(j, "prompt_logprobs")) {
    r.prompt_logprobs = integer_in(*v, "prompt_logprobs", 0, limits.max_logprobs);
    if (r.use_beam_search) throw bad("prompt_logprobs", "beam search does not return prompt logprobs");
  }
  bool structured = false;
  for (const char* name :
       {"response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"})
    structured = structured || field(j, name) != nullptr;
  if (structured) {
    const ojson ordered = parse_json_in_order(body);  // parsed once already
    if (ordered.is_discarded()) throw ApiError(400, "the request body is not valid JSON", "", "invalid_json");
    r.structured_output = parse_structured_output(ordered);
  }
  if (r.use_beam_search && r.structured_output)
    throw bad(r.structured_output->param, "structured output does not work with beam search ('use_beam_search')");
  if (r.tools.parses_calls() && r.use_beam_search)
    throw bad("tools",
              "tool calls are not parsed from beam search hypotheses; leave out 'use_beam_search' or set "
              "'tool_choice' to \"none\"");
  if (r.tools.forces_calls() && r.structured_output)
    throw bad(r.structured_output->param,
              fmt::format("'tool_choice' forces a tool call, which '{}' would constrain too; give one of them",
                          r.structured_output->param),
              "conflicting_fields");
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body) {
  const json j = parse_object(body);
  TokenizeRequest r;
  if (const json* v = field(j, "add_special_tokens")) r.add_special_tokens = boolean(*v, "add_special_tokens");
  if (const json* p = field(j, "prompt")) {
    r.prompt = string(*p, "prompt");
  } else if (const json* m = field(j, "messages")) {
    r.messages = parse_messages(*m);
    r.chat_input = parse_chat_template_input(body);
  } else {
    throw bad("prompt", "'prompt' (a string) or 'messages' is required", "missing_field");
  }
  return r;
}

std::vector<TokenId> parse_detokenize_request(std::string_view body, int vocab_size) {
  const json j = parse_object(body);
  const json* t = field(j, "tokens");
  if (t == nullptr || !t->is_array())
    throw bad("tokens", "'tokens' (a list of token ids) is required", "missing_field");
  std::vector<TokenId> tokens;
  tokens.reserve(t->size());
  for (const json& e : *t) {
    if (!e.is_number_integer()) throw bad("tokens", "'tokens' must hold integers", "invalid_type");
    const bool too_big = e.is_number_unsigned() && e.get<uint64_t>() >= static_cast<uint64_t>(std::max(vocab_size, 0));
    const int64_t id = too_big ? vocab_size : e.get<int64_t>();
    if (id < 0 || id >= vocab_size)
      throw bad("tokens", fmt::format("token id {} is outside the vocabulary [0, {})", e.dump(), vocab_size),
                "invalid_token_id");
    tokens.push_back(static_cast<TokenId>(id));
  }
  return tokens;
}

namespace {

// The llama2c tokenizer's encoding is quadratic in the text (run.c's merge loop): a text too long
// to fit the model whatever its tokens is refused unencoded, or one request could hold a CPU for hours.
void check_encodable(const TextTokenizer& tokenizer, size_t bytes, int max_model_len, const char* param) {
  const int64_t most_bytes = static_cast<int64_t>(max_model_len) * std::max(1, tokenizer.max_piece_bytes());
  if (static_cast<int64_t>(bytes) > most_bytes)
    throw ApiError(400,
                   fmt::format("this model's maximum context length is {} tokens; a prompt of {} bytes cannot fit "
                               "(no token of this vocabulary is longer than {} bytes)",
                               max_model_len, bytes, tokenizer.max_piece_bytes()),
                   param, "context_length_exceeded");
}

}  // namespace

std::vector<TokenId> encode_bounded(const TextTokenizer& tokenizer, std::string_view text, bool add_bos,
                                    int max_model_len, const char* param) {
  check_encodable(tokenizer, text.size(), max_model_len, param);
  return tokenizer.encode(text, add_bos);
}

std::vector<TokenId> encode_bounded(const TextTokenizer& tokenizer, std::span<const PromptPart> parts, bool add_bos,
                                    int max_model_len, const char* param) {
  size_t bytes = 0;
  for (const PromptPart& p : parts) bytes += p.special ? 0 : p.text.size();  // a marker is one token
  check_encodable(tokenizer, bytes, max_model_len, param);
  return tokenizer.encode_parts(parts, add_bos);
}

void refuse_tools_in_built_in_template(const ChatTemplateInput& input, ChatTemplate chat_template) {
  const bool tools = input.tools.is_array() && !input.tools.empty();
  if (!tools && !has_tool_history(input.messages)) return;
  throw ApiError(400,
                 fmt::format("the served model's chat template (built-in '{}') has no tool format; serve a model whose "
                             "file has a chat template with tools, or pass one with --chat-template",
                             chat_template_name(chat_template)),
                 tools ? "tools" : "messages", "unsupported_tools");
}

std::vector<PreparedPrompt> prepare_request(const CompletionRequest& request, const TextTokenizer& tokenizer,
                                            const ModelLimits& model, ChatTemplate chat_template,
                                            const ModelChatTemplate* model_template) {
  if (!request.model.empty() && request.model != model.served_model_name)
    throw ApiError(
        404,
        fmt::format("the model '{}' does not exist; this server serves '{}'", request.model, model.served_model_name),
        "model", "model_not_found");
  for (const auto& [id, bias] : request.logit_bias)
    if (id >= model.vocab_size)
      throw ApiError(400,
                     fmt::format("logit_bias names token {}, outside the vocabulary [0, {})", id, model.vocab_size),
                     "logit_bias", "invalid_token_id");
  for (TokenId id : request.stop_token_ids)
    if (id >= model.vocab_size)
      throw ApiError(400,
                     fmt::format("stop_token_ids names token {}, outside the vocabulary [0, {})", id, model.vocab_size),
                     "stop_token_ids", "invalid_token_id");
  std::vector<std::vector<TokenId>> prompts;
  if (request.endpoint == ApiEndpoint::kChatCompletions && model_template == nullptr)
    refuse_tools_in_built_in_template(request.chat_input, chat_template);
  if (request.endpoint == ApiEndpoint::kChatCompletions) {
    if (model_template != nullptr)
      prompts.push_back(encode_bounded(tokenizer, model_template->render(request.chat_input), false,
                                       model.max_model_len, "messages"));
    else
      prompts.push_back(encode_bounded(tokenizer, render_chat(chat_template, request.messages), true,
                                       model.max_model_len, "messages"));
  } else {
    std::optional<FillInMiddleTokens> fim;
    if (!request.suffix.empty()) {
      fim = tokenizer.fill_in_middle_tokens();
      if (!fim)
        throw ApiError(400,
                       "'suffix' asks for fill-in-the-middle, which needs a vocabulary with fill-in-the-middle tokens "
                       "(<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|> or the like, or GGUF's "
                       "tokenizer.ggml.fim_pre/suf/mid_token_id); the served model's has none",
                       "suffix", "unsupported_field");
    }
    for (const PromptInput& p : request.prompts) {
      if (fim) {
        if (!p.is_text)
          throw bad("suffix", "'suffix' needs text prompts: fill-in-the-middle encodes the prompt (the prefix) itself");
        // BOS where the vocabulary adds one (encoding nothing gives just that).
        std::vector<TokenId> ids;
        const std::vector<TokenId> start = tokenizer.encode("", true);
        if (!start.empty() && start.front() == tokenizer.bos_id()) ids.push_back(start.front());
        ids.push_back(fim->prefix);
        for (TokenId t : encode_bounded(tokenizer, p.text, false, model.max_model_len, "prompt")) ids.push_back(t);
        ids.push_back(fim->suffix);
        for (TokenId t : encode_bounded(tokenizer, request.suffix, false, model.max_model_len, "suffix"))
          ids.push_back(t);
        ids.push_back(fim->middle);
        prompts.push_back(std::move(ids));
        continue;
      }
      if (p.is_text) {
        prompts.push_back(encode_bounded(tokenizer, p.text, true, model.max_model_len, "prompt"));
        continue;
      }
      for (TokenId id : p.token_ids)
        if (id >= model.vocab_size)
          throw ApiError(400, fmt::format("token id {} is outside the vocabulary [0, {})", id, model.vocab_size),
                         "prompt", "invalid_token_id");
      prompts.push_back(p.token_ids);
    }
  }
  std::vector<PreparedPrompt> out;
  for (auto& ids : prompts) {
    const int len = static_cast<int>(ids.size());
    const char* param = request.endpoint == ApiEndpoint::kChatCompletions ? "messages" : "prompt";
    if (len >= model.max_model_len)
      throw ApiError(
          400,
          fmt::format(
              "this model's maximum context length is {} tokens; the prompt has {} tokens, leaving no room to generate",
              model.max_model_len, len),
          param, "context_length_exceeded");
    int max_tokens =
        request.max_tokens.value_or(request.endpoint == ApiEndpoint::kChatCompletions ? model.max_model_len - len : 16);
    if (len + static_cast<int64_t>(max_tokens) > model.max_model_len)
      throw ApiError(400,
                     fmt::format("this model's maximum context length is {} tokens; you requested {} tokens ({} in the "
                                 "prompt, {} for the completion)",
                                 model.max_model_len, len + static_cast<int64_t>(max_tokens), len, max_tokens),
                     "max_tokens", "context_length_exceeded");
    out.push_back({std::move(ids), max_tokens});
  }
  return out;
}

}  // namespace pagedkv::api
