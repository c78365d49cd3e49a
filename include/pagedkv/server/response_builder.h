// ResponseBuilder: turns the engine's token updates for one API request into OpenAI's response
// shapes, for /v1/completions ("text_completion") and /v1/chat/completions ("chat.completion"),
// streamed (one chunk per update of a choice) or whole.
//
// Per choice it detokenizes incrementally (the piece of each token given the one before, exactly
// as the tokenizer's render() prints a sequence), applies stop strings (StopStringMatcher), and
// collects logprobs. A stop string ends a choice in the response at once; the caller then tells
// the engine to stop that sample (stop_requests()). Given a tool-call parser (a chat request whose
// tool_choice is not "none"), each choice's text is read for calls: message.tool_calls and
// finish_reason "tool_calls" whole, OpenAI's tool_calls deltas streamed (a call's id, type and
// name first, then its arguments), the markup never sent as content.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pagedkv/api/openai_request.h"
#include "pagedkv/api/stop_string_matcher.h"
#include "pagedkv/api/tool_call_reader.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"
#include "pagedkv/server/request_stream.h"

namespace pagedkv::server {

// JSON text that never throws on invalid UTF-8 (a token piece may be part of a character).
std::string json_text(const nlohmann::json& j);

// The text of a token sequence, as /detokenize and echo show it: a leading BOS is context only
// (as TextTokenizer::render treats it); any other first token is printed.
std::string detokenize(const TextTokenizer& tokenizer, std::span<const TokenId> ids);

class ResponseBuilder {
 public:
  // `id`: the response id ("cmpl-..." / "chatcmpl-..."); `created`: Unix seconds.
  // `tool_parser`: reads tool calls out of each choice (must outlive the builder); `call_id_seed`
  // seeds their ids.
  ResponseBuilder(const api::CompletionRequest& request, const TextTokenizer& tokenizer, std::string id,
                  std::string model, int64_t created, int num_prompts, const api::ToolCallParser* tool_parser = nullptr,
                  uint64_t call_id_seed = 0);

  // Applies one update; when streaming, returns the chunks it produced as JSON text (none when
  // nothing new is visible).
  std::vector<std::string> apply(const ChoiceUpdate& update);
  // Engine requests whose choice a stop string just ended (each returned once).
  std::vector<RequestId> take_stop_requests();

  bool done() const { return finished_choices_ == static_cast<int>(choices_.size()); }
  // The first engine refusal, if any (the whole request then fails with this message).
  const std::optional<std::string>& error() const { return error_; }

  nlohmann::json response() const;  // the non-streaming body
  nlohmann::json usage() const;  // prompt/completion/total tokens and cached prompt tokens
  std::string usage_chunk() const;  // the final chunk of stream_options.include_usage, as JSON text

 private:
  struct Choice {
    Choice(const std::vector<std::string>& stops, bool include_stop) : matcher(stops, include_stop) {}
    TokenId prev = -1;  // the last token decoded (context for the next piece)
    api::StopStringMatcher matcher;
    std::string text;  // everything emitted (non-streaming response); with tools, the content
    std::optional<api::ToolCallReader> tool_reader;
    std::vector<api::ToolCall> calls;
    bool started = false;
    bool finished = false;
    std::string finish_reason;
    int completion_tokens = 0;
    RequestId engine_id;
    // return_token_ids: every output token taken (the response), and those not yet in a chunk.
    std::vector<TokenId> token_ids;
    std::vector<TokenId> unsent_token_ids;
    bool prompt_ids_sent = false;  // streamed: the first chunk carries the prompt's ids
    bool prompt_logprobs_sent = false;  // streamed: the first chunk once they are known
    // logprobs, completions shape: tokens, token_logprobs, top_logprobs, text_offset; chat: content.
    nlohmann::json logprob_tokens = nlohmann::json::array();
    nlohmann::json logprob_values = nlohmann::json::array();
    nlohmann::json logprob_tops = nlohmann::json::array();
    nlohmann::json text_offsets = nlohmann::json::array();
    nlohmann::json chat_logprobs = nlohmann::json::array();
  };
  // Decodes `tokens` into the choice; returns the text it emits. Stops at a stop string.
  std::string take_tokens(Choice& c, const ChoiceUpdate& u, nlohmann::json& chunk_logprobs);
  std::string chunk(int index, const std::string& text, const nlohmann::json& logprobs, const char* finish_reason,
                    bool first, Choice& c);
  // The text token `token` adds after `prev`; with skip_special_tokens false a control token's text.
  std::string piece(TokenId prev, TokenId token) const;
  // How logprobs name a token: its piece, or "token_id:N" (return_tokens_as_token_ids).
  std::string logprob_token(TokenId prev, TokenId token) const;
  // The echoed prompt's text.
  std::string prompt_text(std::span<const TokenId> prompt) const;
  // Streamed: the fields a chunk of `c` adds besides text and logprobs, to its choice and to the
  // chunk itself (return_token_ids: the new tokens' ids, and the prompt's with a choice's first
  // chunk; prompt_logprobs: once); both null when there are none.
  void take_extra_fields(Choice& c, int index, nlohmann::json& choice, nlohmann::json& top);
  // vLLM's prompt_logprobs list: null for the first token, then per token a dict of token id ->
  // {logprob, rank, decoded_token} holding the prompt's token and the top-k.
  nlohmann::json prompt_logprobs_json(std::span<const TokenId> prompt, std::span<const TokenLogprobs> entries) const;
  // A chat chunk with `delta` (the tool-calling path).
  std::string chat_chunk(int index, nlohmann::json delta, const nlohmann::json& logprobs, const char* finish_reason,
                         Choice* ids_of = nullptr);
  // The chunks of one update of a choice read for tool calls.
  std::vector<std::string> tool_chunks(int index, const api::ToolCallReader::Output& out, size_t first_call,
                                       const nlohmann::json& logprobs, const char* finish_reason, bool first,
                                       Choice& c);

  const api::CompletionRequest& request_;
  const TextTokenizer& tokenizer_;
  std::string id_, model_;
  int64_t created_;
  bool chat_;
  bool streaming_;
  std::string completion_chunk_head_;  // a text chunk's JSON up to the choice index (the hot path)
  std::vector<Choice> choices_;
  std::vector<int> prompt_tokens_;  // per prompt
  std::vector<std::vector<TokenId>> prompt_ids_;  // per prompt, for return_token_ids
  std::vector<nlohmann::json> prompt_logprobs_;  // per prompt, once known (null before)
  std::vector<int> cached_tokens_;  // per prompt
  int finished_choices_ = 0;
  std::vector<RequestId> stop_requests_;
  std::optional<std::string> error_;
};

}  // namespace pagedkv::server
