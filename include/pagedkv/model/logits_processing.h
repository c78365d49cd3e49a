// The adjustments a request's sampling parameters make to a row of logits before temperature,
// in vLLM's order: banned tokens (min_tokens holds back the stop tokens), logit bias, then the
// repetition, frequency and presence penalties.
//
//   logit_bias:          logit[t] += bias[t]                                     (OpenAI)
//   repetition_penalty:  t in prompt or output: logit[t] = logit[t] > 0 ? logit[t] / p : logit[t] * p
//                                                                                  (vLLM, CTRL)
//   frequency_penalty:   logit[t] -= frequency_penalty * count of t in the output  (OpenAI)
//   presence_penalty:    logit[t] -= presence_penalty if t occurs in the output   (OpenAI)
#pragma once

#include <span>

#include "pagedkv/core/ids.h"
#include "pagedkv/model/sampler.h"

namespace pagedkv {

// Adjusts `logits` (the vocabulary's row) in place for a request whose prompt and output so far
// are given; `banned` tokens get -infinity first. Token ids outside the row are ignored.
void adjust_logits(std::span<float> logits, const SamplingParams& params, std::span<const TokenId> prompt,
                   std::span<const TokenId> output, std::span<const TokenId> banned);

}  // namespace pagedkv
