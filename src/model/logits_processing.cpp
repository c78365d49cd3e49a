#include "pagedkv/model/logits_processing.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace pagedkv {

void adjust_logits(std::span<float> logits, const SamplingParams& params, std::span<const TokenId> prompt,
                   std::span<const TokenId> output, std::span<const TokenId> banned) {
  const auto in_row = [&](TokenId t) { return t >= 0 && static_cast<size_t>(t) < logits.size(); };
  for (TokenId t : banned)
    if (in_row(t)) logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
  for (const auto& [t, bias] : params.logit_bias)
    if (in_row(t)) logits[static_cast<size_t>(t)] += bias;

  if (params.repetition_penalty != 1.0f) {
    // Each distinct token once, whether it occurs in the prompt, the output or both.
    std::vector<TokenId> seen(prompt.begin(), prompt.end());
    seen.insert(seen.end(), output.begin(), output.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (TokenId t : seen) {
      if (!in_row(t)) continue;
      float& l = logits[static_cast<size_t>(t)];
      l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    }
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::vector<TokenId> sorted(output.begin(), output.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      if (in_row(sorted[i]))
        logits[static_cast<size_t>(sorted[i])] -=
            params.frequency_penalty * static_cast<float>(j - i) + params.presence_penalty;
      i = j;
    }
  }
}

}  // namespace pagedkv
