#include "pagedkv/engine/beam_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pagedkv/core/error.h"

namespace pagedkv {

void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  if (logits.empty()) throw UsageError("log_softmax: empty logits row");
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = max + std::log(sum);
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_z;
}

std::vector<BeamCandidate> select_beams(std::span<const double> cumulative,
                                        std::span<const std::vector<double>> logprobs, int width) {
  if (width < 1) throw UsageError(fmt::format("select_beams: width must be at least 1, got {}", width));
  if (cumulative.size() != logprobs.size() || cumulative.empty())
    throw UsageError(fmt::format("select_beams: {} scores for {} logprob rows", cumulative.size(), logprobs.size()));
  const size_t vocab = logprobs[0].size();
  std::vector<BeamCandidate> all;
  all.reserve(cumulative.size() * vocab);
  for (size_t b = 0; b < logprobs.size(); ++b) {
    if (logprobs[b].size() != vocab || vocab == 0)
      throw UsageError(fmt::format("select_beams: row {} has {} entries, row 0 {}", b, logprobs[b].size(), vocab));
    for (size_t t = 0; t < vocab; ++t)
      all.push_back({static_cast<int>(b), static_cast<TokenId>(t), cumulative[b] + logprobs[b][t]});
  }
  const size_t k = std::min(all.size(), static_cast<size_t>(width));
  std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(k), all.end(),
                    [](const BeamCandidate& a, const BeamCandidate& b) {
                      if (a.score != b.score) return a.score > b.score;
                      return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
                    });
  all.resize(k);
  return all;
}

}  // namespace pagedkv
