// Log-probabilities of a sampled position, as the OpenAI API reports them (`logprobs`): the
// chosen token's and the k most likely tokens', under the model's raw distribution
// (log_softmax of the logits, before temperature or top-p), which is what vLLM returns by default.
#pragma once

#include <span>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv {

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0;
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the k most likely, most likely first (ties: lower id first)
  int chosen_rank = 0;  // 1 + the number of tokens strictly more likely than the chosen one (vLLM's rank)
};

// `logits`: one row (vocab_size values). `top_k` is clamped to the vocabulary; 0 gives no `top`.
TokenLogprobs compute_logprobs(std::span<const float> logits, TokenId chosen, int top_k);

}  // namespace pagedkv
