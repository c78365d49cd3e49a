#include "pagedkv/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    throw ConfigError(fmt::format("temperature must be finite and >= 0, got {}", temperature));
  if (top_k < 0) throw ConfigError(fmt::format("top_k must be >= 0 (0 = off), got {}", top_k));
  if (!(top_p >= 0.0f && top_p <= 1.0f))
    throw ConfigError(fmt::format("top_p must be in [0, 1] (0 or 1 = off), got {}", top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    throw ConfigError(fmt::format("min_p must be in [0, 1] (0 = off), got {}", min_p));
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty))
    throw ConfigError("presence_penalty and frequency_penalty must be finite");
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f))
    throw ConfigError(fmt::format("repetition_penalty must be finite and > 0 (1 = off), got {}", repetition_penalty));
  for (const auto& [token, bias] : logit_bias)
    if (token < 0 || !std::isfinite(bias)) throw ConfigError(fmt::format("logit_bias: bad entry for token {}", token));
}

Sampler::Sampler(int vocab_size, const SamplingParams& params)
    : vocab_size_(vocab_size), params_(params), rng_state_(params.seed != 0 ? params.seed : kZeroSeedReplacement) {
  if (vocab_size <= 0) throw ConfigError(fmt::format("sampler vocab_size must be positive, got {}", vocab_size));
  params_.validate();
  for (const auto& [token, bias] : params_.logit_bias)
    if (token >= vocab_size)
      throw ConfigError(fmt::format("logit_bias names token {}, outside the vocabulary [0, {})", token, vocab_size));
}

TokenId Sampler::argmax(std::span<const float> values) {
  if (values.empty()) throw UsageError("argmax of an empty logits row");
  size_t best = 0;
  float best_value = values[0];
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > best_value) {  // strict: the first (lowest) index keeps a tie
      best = i;
      best_value = values[i];
    }
  }
  return static_cast<TokenId>(best);
}

float Sampler::random_f32(uint64_t& state) {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  const auto u32 = static_cast<uint32_t>((state * 0x2545F4914F6CDD1Dull) >> 32);
  return static_cast<float>(u32 >> 8) / 16777216.0f;
}

TokenId Sampler::sample(std::span<const float> logits) {
  if (logits.size() != static_cast<size_t>(vocab_size_))
    throw UsageError(fmt::format("sampler expects {} logits, got {}", vocab_size_, logits.size()));
  if (params_.greedy()) return argmax(logits);

  // Temperature and softmax, in run.c's float operation order.
  probs_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) probs_[i] = logits[i] / params_.temperature;
  float max_value = probs_[0];
  for (size_t i = 1; i < probs_.size(); ++i)
    if (probs_[i] > max_value) max_value = probs_[i];
  float sum = 0.0f;
  for (float& p : probs_) {
    p = std::exp(p - max_value);
    sum += p;
  }
  // Logits holding NaN or infinity (a model file's broken weights) have no distribution; their
  // argmax is still a token (sorting NaN probabilities below would not be defined).
  if (!(sum > 0.0f && std::isfinite(sum))) return argmax(logits);
  for (float& p : probs_) p /= sum;
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * *std::max_element(probs_.begin(), probs_.end());
    float kept = 0.0f;
    for (float& p : probs_) {
      if (p < threshold) p = 0.0f;
      kept += p;
    }
    for (float& p : probs_) p /= kept;
  }

  const float coin = random_f32(rng_state_);
  if (vocab_size_ == 1) return 0;
  if (params_.top_k > 0 && params_.top_k < vocab_size_) return sample_top_k(coin);
  if (params_.top_p <= 0.0f || params_.top_p >= 1.0f) {
    // run.c sample_mult: inverse CDF in id order.
    float cdf = 0.0f;
    for (size_t i = 0; i < probs_.size(); ++i) {
      cdf += probs_[i];
      if (coin < cdf) return static_cast<TokenId>(i);
    }
    return vocab_size_ - 1;  // rounding: the CDF never reached the coin
  }
  return sample_top_p(coin, params_.top_p);
}

// run.c sample_topp.
TokenId Sampler::sample_top_p(float coin, float top_p) {
  // Tokens below (1 - top_p) / (n - 1) can never be in the nucleus; skip them before sorting.
  const float cutoff = (1.0f - top_p) / static_cast<float>(vocab_size_ - 1);
  candidates_.clear();
  for (size_t i = 0; i < probs_.size(); ++i)
    if (probs_[i] >= cutoff) candidates_.push_back({probs_[i], static_cast<TokenId>(i)});
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [](const ProbIndex& a, const ProbIndex& b) { return a.prob > b.prob; });
  // Only a nearly uniform distribution with a tiny top_p leaves nothing above the cutoff (run.c
  // then reads before its buffer); the most probable token is the sensible answer.
  if (candidates_.empty()) return argmax(probs_);
  return sample_nucleus(coin, top_p);
}

// candidates_ sorted by falling probability: keep the shortest head whose mass exceeds top_p (all
// of it when top_p >= 1) and pick by coin * that mass, as run.c's sample_topp does.
TokenId Sampler::sample_nucleus(float coin, float top_p) const {
  float cumulative = 0.0f;
  size_t last = candidates_.size() - 1;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += candidates_[i].prob;
    if (cumulative > top_p) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i) {
    cdf += candidates_[i].prob;
    if (r < cdf) return candidates_[i].index;
  }
  return candidates_[last].index;
}

TokenId Sampler::sample_top_k(float coin) {
  const auto k = static_cast<size_t>(params_.top_k);
  candidates_.clear();
  for (size_t i = 0; i < probs_.size(); ++i) candidates_.push_back({probs_[i], static_cast<TokenId>(i)});
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k), candidates_.end(),
                    [](const ProbIndex& a, const ProbIndex& b) {
                      return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
                    });
  candidates_.resize(k);
  float kept = 0.0f;
  for (const auto& c : candidates_) kept += c.prob;
  for (auto& c : candidates_) c.prob /= kept;

  const float top_p = params_.top_p;
  const bool nucleus = top_p > 0.0f && top_p < 1.0f;
  return sample_nucleus(coin, nucleus ? top_p : std::numeric_limits<float>::infinity());
}

}  // namespace pagedkv
