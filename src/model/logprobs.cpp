#include "pagedkv/model/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "pagedkv/core/error.h"

namespace pagedkv {

TokenLogprobs compute_logprobs(std::span<const float> logits, TokenId chosen, int top_k) {
  if (logits.empty()) throw UsageError("compute_logprobs: empty logits row");
  if (chosen < 0 || static_cast<size_t>(chosen) >= logits.size())
    throw UsageError("compute_logprobs: the chosen token is outside the logits row");
  // log_softmax(x)_i = x_i - (max + log(sum exp(x_j - max))), in double for the sum.
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = static_cast<double>(max) + std::log(sum);
  auto logprob = [&](TokenId t) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(t)]) - log_z);
  };
  TokenLogprobs out;
  out.chosen = {chosen, logprob(chosen)};
  const float chosen_logit = logits[static_cast<size_t>(chosen)];
  out.chosen_rank =
      1 + static_cast<int>(std::count_if(logits.begin(), logits.end(), [&](float x) { return x > chosen_logit; }));
  const int k = std::clamp(top_k, 0, static_cast<int>(logits.size()));
  if (k == 0) return out;
  std::vector<TokenId> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](TokenId a, TokenId b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la != lb ? la > lb : a < b;
  });
  out.top.reserve(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) out.top.push_back({ids[static_cast<size_t>(i)], logprob(ids[static_cast<size_t>(i)])});
  return out;
}

}  // namespace pagedkv
