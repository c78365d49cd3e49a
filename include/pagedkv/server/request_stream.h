// The channel between the engine thread and the HTTP thread serving one API request.
//
// The engine thread pushes what each choice (one sample of one prompt) produced since its last
// update; the HTTP thread waits for updates, turns them into text and responses, and may cancel.
// The stream's mutex is held only to move updates in and out, never across an engine step or a
// socket write, so neither side can stall the other.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/model/logprobs.h"
#include "pagedkv/scheduler/scheduler_request.h"

namespace pagedkv::server {

struct ChoiceUpdate {
  int choice = 0;  // prompt index * n + sample index
  RequestId engine_id;  // the engine request producing this choice
  std::vector<TokenId> tokens;  // new tokens, in order
  std::vector<TokenLogprobs> logprobs;  // one per new token when logprobs were asked for
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  // Set on a choice's first update: its prompt (for echo and usage) and prefix-cache hit tokens.
  bool first = false;
  std::vector<TokenId> prompt;
  int cached_tokens = 0;
  // With the first update of a prompt's sample 0, when prompt logprobs were asked for: entry i is
  // prompt token i + 1's (GenerationRequest::prompt_logprobs).
  std::vector<TokenLogprobs> prompt_logprobs;
  std::string error;  // the engine refused the request (finish_reason kRejected)
};

class RequestStream {
 public:
  explicit RequestStream(int num_choices) : num_choices_(num_choices) {}

  int num_choices() const { return num_choices_; }

  // Engine thread.
  void push(ChoiceUpdate update);

  // HTTP thread: waits until updates are pending or `timeout` passes; returns them all (oldest
  // first), possibly none.
  std::vector<ChoiceUpdate> wait(std::chrono::milliseconds timeout);

 private:
  const int num_choices_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ChoiceUpdate> pending_;
};

}  // namespace pagedkv::server
