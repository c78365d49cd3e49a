// The adjustments before temperature (logit bias, repetition / frequency / presence penalties,
// banned tokens) against values computed by hand from OpenAI's and vLLM's definitions, and
// min_p in the sampler.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/model/logits_processing.h"
#include "pagedkv/model/sampler.h"

namespace pagedkv {
namespace {

TEST(LogitsProcessing, EachAdjustmentAsDefined) {
  const std::vector<float> base{2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  const std::vector<TokenId> prompt{0, 1};
  const std::vector<TokenId> output{3, 3, 5, 1};
  {  // logit bias only
    SamplingParams p;
    p.logit_bias = {{2, 10.0f}, {4, -100.0f}, {99, 5.0f}};  // 99 lies outside the row: ignored
    std::vector<float> l = base;
    adjust_logits(l, p, prompt, output, {});
    EXPECT_EQ(l, (std::vector<float>{2.0f, -1.0f, 10.5f, 3.0f, -102.0f, 1.0f}));
  }
  {  // repetition: tokens of the prompt or the output, each once; positive / p, negative * p
    SamplingParams p;
    p.repetition_penalty = 2.0f;
    std::vector<float> l = base;
    adjust_logits(l, p, prompt, output, {});
    EXPECT_EQ(l, (std::vector<float>{1.0f, -2.0f, 0.5f, 1.5f, -2.0f, 0.5f}));
  }
  {  // frequency per occurrence in the output, presence once per token present; the prompt does not count
    SamplingParams p;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    std::vector<float> l = base;
    adjust_logits(l, p, prompt, output, {});
    EXPECT_EQ(l, (std::vector<float>{2.0f, -1.0f - 0.75f, 0.5f, 3.0f - 1.25f, -2.0f, 1.0f - 0.75f}));
  }
  {  // banned tokens first, then the rest still applies to the others
    SamplingParams p;
    p.logit_bias = {{0, 1.0f}};
    std::vector<float> l = base;
    const std::vector<TokenId> banned{3, 5};
    adjust_logits(l, p, prompt, output, banned);
    EXPECT_EQ(l[0], 3.0f);
    EXPECT_EQ(l[3], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(l[5], -std::numeric_limits<float>::infinity());
  }
  {  // vLLM's order: bias before the repetition penalty
    SamplingParams p;
    p.logit_bias = {{1, 3.0f}};
    p.repetition_penalty = 2.0f;
    std::vector<float> l = base;
    adjust_logits(l, p, prompt, {}, {});
    EXPECT_EQ(l[1], 1.0f) << "(-1 + 3) / 2";
  }
  SamplingParams none;
  EXPECT_FALSE(none.adjusts_logits());
}

TEST(LogitsProcessing, MinPKeepsOnlyTokensNearTheMostProbable) {
  // Probabilities about 0.50, 0.30, 0.18, 0.02: min_p 0.5 keeps the first two only.
  std::vector<float> logits{std::log(0.50f), std::log(0.30f), std::log(0.18f), std::log(0.02f)};
  int counts[4] = {};
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    SamplingParams p;
    p.seed = seed;
    p.min_p = 0.5f;
    Sampler s(4, p);
    ++counts[s.sample(logits)];
  }
  EXPECT_EQ(counts[2] + counts[3], 0);
  // Renormalised over the two kept: 0.625 / 0.375.
  EXPECT_NEAR(counts[0] / 2000.0, 0.625, 0.04);
  SamplingParams bad;
  bad.min_p = 1.5f;
  EXPECT_THROW(bad.validate(), ConfigError);
  SamplingParams bias_outside;
  bias_outside.logit_bias = {{4, 1.0f}};
  EXPECT_THROW(Sampler(4, bias_outside), ConfigError);
}

}  // namespace
}  // namespace pagedkv
