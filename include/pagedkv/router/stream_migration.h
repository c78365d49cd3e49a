// StreamMigration: a streamed answer that outlives the instance producing it.
//
// When an instance dies mid-stream the router sends the prompt plus the tokens already relayed,
// as token ids, to another instance (POST /v1/completions: a token-id prompt is taken as it is)
// and goes on relaying the same stream, reshaped as the client's endpoint speaks. The ids come
// from the instance itself: the router asks for them (vLLM's return_token_ids: the prompt's ids
// with a choice's first chunk, each chunk's new ids) and takes them out of what it relays unless
// the client asked too. With greedy decoding the client receives exactly the tokens of an
// uninterrupted run; with sampling the continuation is a fresh draw from the same distribution.
//
// Only answers whose continuation is the same computation migrate: one choice, one prompt, and
// no state over the output beyond its tokens — no tools, structured output, logprobs, echo or
// presence/frequency penalties (they count the output, which the continuation sees as prompt).
// begin() says why a request does not qualify; it then streams, and fails, as before.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedkv/api/openai_request.h"

namespace pagedkv::router {

class StreamMigration {
 public:
  // The state of one streamed request, or null (with `why`) when it cannot migrate.
  static std::unique_ptr<StreamMigration> begin(const std::string& body, api::ApiEndpoint endpoint, std::string& why);

  // The body to send to the first instance: the client's, asking for token ids.
  const std::string& upstream_body() const { return upstream_body_; }

  // Instance bytes in, client bytes out: whole SSE events only (a partial one waits for its
  // end), token ids recorded and removed unless the client asked for them, a continuation's
  // completions chunks reshaped as the client's endpoint and its usage counted from the start.
  std::string relay(std::string_view bytes);

  // Whether the answer can go on elsewhere: the prompt's ids are known and it has not finished.
  bool can_continue() const;
  // The continuation request (for POST /v1/completions); relay() then expects its chunks. An
  // unfinished event of the dead stream is dropped (its tokens were never relayed).
  std::string continue_elsewhere();

  // Nothing of the answer reached the client yet (the instance died before its first chunk):
  // the request itself can go elsewhere, as it is.
  bool nothing_relayed() const;
  std::string restart_elsewhere();  // the body to send again, to the client's endpoint

  int migrations() const { return migrations_; }
  size_t generated_tokens() const { return generated_.size(); }

 private:
  StreamMigration(nlohmann::ordered_json body, api::ApiEndpoint endpoint);
  std::string event(std::string_view text);  // one SSE event (without its blank line)
  std::string chunk(nlohmann::ordered_json chunk);  // one data payload, parsed

  nlohmann::ordered_json body_;
  api::ApiEndpoint endpoint_;
  std::string upstream_body_;
  bool client_wants_ids_ = false;
  std::string buffer_;  // bytes after the last whole event
  std::optional<std::vector<int64_t>> prompt_ids_;
  std::vector<int64_t> generated_;
  size_t generated_at_switch_ = 0;  // tokens relayed before the current continuation
  nlohmann::ordered_json id_, created_, model_;  // of the client's stream, from its first chunk
  bool finished_ = false;
  bool done_ = false;  // [DONE] relayed
  bool continuing_ = false;  // chunks come from a continuation (completions-shaped)
  int migrations_ = 0;
};

}  // namespace pagedkv::router
