// The OpenAI request bodies pagedkv serve accepts, parsed into typed values and validated.
//
// Two stages, so each can be tested alone:
//   parse_completion_request: JSON text -> CompletionRequest (types, ranges, field combinations);
//   prepare_request: CompletionRequest -> token ids and output budgets for the served model
//                    (vocabulary, model length, model name).
// Both throw ApiError with the status the API answers (400 for everything here) and the field at
// fault. Fields of OpenAI's or vLLM's schema that pagedkv does not implement are refused unless
// neutral; fields no schema defines are ignored, as OpenAI's and vLLM's servers ignore them
// (request_fields.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pagedkv/api/chat_template.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/grammar/compiled_grammar.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"
#include "pagedkv/api/model_chat_template.h"
#include "pagedkv/api/tool_definitions.h"

namespace pagedkv::api {

enum class ApiEndpoint { kCompletions, kChatCompletions };

// One prompt of /v1/completions, as sent: text, or token ids.
struct PromptInput {
  bool is_text = true;
  std::string text;
  std::vector<TokenId> token_ids;
};

// What a request asks its output to be (OpenAI's response_format; vLLM's structured_outputs and
// its older guided_json / guided_regex / guided_choice / guided_grammar): a grammar of the given
// kind, compiled by the server (grammar::GrammarCache), never on the engine thread.
struct StructuredOutputRequest {
  grammar::GrammarKind kind = grammar::GrammarKind::kJsonObject;
  std::string text;  // the schema (JSON), the regex, the choices (a JSON array), the GBNF
  std::string param;  // the field it came from ("response_format", "structured_outputs", "guided_json"...)
};

struct CompletionRequest {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string model;  // empty: the served model
  std::vector<PromptInput> prompts;  // /v1/completions: one or more
  // /v1/completions: the text after the completion; non-empty asks for fill-in-the-middle (each
  // text prompt is the prefix), which needs a vocabulary with fill-in-the-middle tokens.
  std::string suffix;
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  ChatTemplateInput chat_input;  // the same, as sent, for a model's own chat template
  std::optional<int> max_tokens;  // absent: 16 for completions, the rest of the context for chat
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // vLLM extension; 0 or -1: off
  float min_p = 0.0f;  // vLLM extension; 0: off
  float presence_penalty = 0.0f;  // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  float repetition_penalty = 1.0f;  // vLLM extension; > 0, 1: off
  std::vector<std::pair<TokenId, float>> logit_bias;  // token id -> [-100, 100], sorted by id
  std::vector<TokenId> stop_token_ids;  // vLLM extension: more tokens that end a choice
  int min_tokens = 0;  // vLLM extension: output tokens before a stop token may end it
  std::optional<uint64_t> seed;
  int n = 1;
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;  // vLLM extension: a matched stop string ends the text
  // vLLM extension: false keeps the text of special (control) tokens, e.g. "</s>", in the output.
  bool skip_special_tokens = true;
  // vLLM extensions: the prompt's and each choice's token ids in the response (return_token_ids);
  // logprobs name tokens "token_id:N" instead of their text (return_tokens_as_token_ids).
  bool return_token_ids = false;
  bool return_tokens_as_token_ids = false;
  bool stream = false;
  // pagedkv extension: the longest the request may take, in seconds (the server's
  // --request-timeout-s when that is shorter); past it it is aborted and answered 408.
  std::optional<std::chrono::milliseconds> timeout;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;  // completions: the prompt text precedes the completion
  int logprobs = -1;  // top-k alternatives per token; -1: no logprobs
  // vLLM extension: each prompt token's logprob and the top-k there; -1: none. The whole prompt
  // is computed (no prefix-cache hit).
  int prompt_logprobs = -1;
  int priority = 0;  // vLLM extension: lower runs first
  std::string cache_salt;  // vLLM extension: prefix-cache isolation between tenants
  bool ignore_eos = false;  // vLLM extension
  // vLLM extension: beam search of width n (the choices are its hypotheses, best first);
  // sampling fields are unused; not with stream or logprobs.
  bool use_beam_search = false;
  // At most one structured-output field per request (else 400); absent: free text.
  std::optional<StructuredOutputRequest> structured_output;
  // Chat: tools, tool_choice, parallel_tool_calls (tool_definitions.h).
  ToolRequest tools;
};

struct RequestLimits {
  int max_n = 64;
  int max_logprobs = 20;
  int max_prompts = 64;  // prompts in one /v1/completions request
  int max_stop_strings = 16;
  int max_logit_bias = 1024;  // logit_bias entries (OpenAI allows 300; vLLM any)
};

CompletionRequest parse_completion_request(std::string_view body, ApiEndpoint endpoint, const RequestLimits& limits);

// POST /tokenize (vLLM's shape): a text prompt, or chat messages rendered as
// /v1/chat/completions renders them; BOS first unless add_special_tokens is false.
struct TokenizeRequest {
  bool add_special_tokens = true;
  std::optional<std::string> prompt;  // absent: `messages` (non-empty)
  std::vector<ChatMessage> messages;
  ChatTemplateInput chat_input;
};

TokenizeRequest parse_tokenize_request(std::string_view body);

// POST /detokenize: {"tokens": [ids]}, each id inside [0, vocab_size).
std::vector<TokenId> parse_detokenize_request(std::string_view body, int vocab_size);

// What the served model allows.
struct ModelLimits {
  std::string served_model_name;
  int max_model_len = 0;
  int vocab_size = 0;
};

// One prompt ready for the engine.
struct PreparedPrompt {
  std::vector<TokenId> token_ids;
  int max_tokens = 0;
};

// Encodes `text`, unless it is too long to fit `max_model_len` tokens whatever they are
// (TextTokenizer::max_piece_bytes): then ApiError 400 context_length_exceeded naming `param`.
std::vector<TokenId> encode_bounded(const TextTokenizer& tokenizer, std::string_view text, bool add_bos,
                                    int max_model_len, const char* param);
// The same for a prompt of parts (a chat template's rendering; TextTokenizer::encode_parts).
std::vector<TokenId> encode_bounded(const TextTokenizer& tokenizer, std::span<const PromptPart> parts, bool add_bos,
                                    int max_model_len, const char* param);

// Tokenizes text prompts (BOS first; with a `suffix`, the fill-in-the-middle prompt in
// prefix-suffix-middle order: BOS where the vocabulary adds one, the prefix token, the prompt, the
// suffix token, the suffix, the middle token; a 400 naming `suffix` when the vocabulary has no
// such tokens or a prompt is token ids) and chat messages (rendered with the model's own template
// when `model_template` is given, which prints BOS itself, else with `chat_template`), checks the
// model name, token ids and that prompt + max_tokens fits the model length. The built-in
// templates have no tool format: tools or tool-calling history with them are a 400.
// ApiError 400 (code unsupported_tools) when a chat request rendered by a built-in template
// (chat_template.h: none has a tool format) has tools or tool-calling history.
void refuse_tools_in_built_in_template(const ChatTemplateInput& input, ChatTemplate chat_template);

std::vector<PreparedPrompt> prepare_request(const CompletionRequest& request, const TextTokenizer& tokenizer,
                                            const ModelLimits& model,
                                            ChatTemplate chat_template = ChatTemplate::kDefault,
                                            const ModelChatTemplate* model_template = nullptr);

}  // namespace pagedkv::api
