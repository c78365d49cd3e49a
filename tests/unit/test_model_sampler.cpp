// The sampler: greedy ties, the xorshift generator, temperature / top-k / top-p properties,
// per-request seeds, and — on stories260K — the exact text llama2.c's run.c samples.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <map>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/sampler.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

SamplingParams params(float temperature, int top_k, float top_p, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

// Relative frequencies of `draws` samples from `logits`.
std::map<TokenId, double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<TokenId, double> f;
  for (int i = 0; i < draws; ++i) f[s.sample(logits)] += 1.0 / draws;
  return f;
}

TEST(Sampler, GreedyTakesTheFirstMaximumAndDrawsNothing) {
  Sampler s(5, params(0.0f, 0, 0.9f, 42));
  const uint64_t before = s.rng_state();
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 2, 3, -1}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-5, -5, -5, -5, -5}), 0);
  EXPECT_EQ(s.rng_state(), before);  // run.c does not advance the generator when greedy
  EXPECT_EQ(Sampler::argmax(std::vector<float>{0, 7, 7}), 1);
  EXPECT_THROW(s.sample(std::vector<float>{1, 2}), UsageError);
}

TEST(Sampler, XorshiftGeneratorIsRunCs) {
  // xorshift64* by hand for one step from state 1: 1 ^ (1<<25) = 0x2000001, then ^ (>>27) = same.
  uint64_t state = 1;
  const float f = Sampler::random_f32(state);
  EXPECT_EQ(state, 0x2000001ull);
  const auto u32 = static_cast<uint32_t>((0x2000001ull * 0x2545F4914F6CDD1Dull) >> 32);
  EXPECT_EQ(f, static_cast<float>(u32 >> 8) / 16777216.0f);
  // Values lie in [0, 1) and the stream is a pure function of the seed.
  uint64_t a = 42, b = 42;
  for (int i = 0; i < 1000; ++i) {
    const float x = Sampler::random_f32(a);
    EXPECT_EQ(x, Sampler::random_f32(b));
    EXPECT_GE(x, 0.0f);
    EXPECT_LT(x, 1.0f);
  }
  // Seed 0 would freeze xorshift at 0; it is replaced by a fixed non-zero state.
  EXPECT_EQ(Sampler(4, params(1, 0, 1, 0)).rng_state(), Sampler::kZeroSeedReplacement);
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  // Probabilities 1/7, 2/7, 4/7 at temperature 1.
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f)};
  Sampler s(3, params(1.0f, 0, 1.0f, 2024));
  auto f = frequencies(s, logits, 40000);
  EXPECT_NEAR(f[0], 1.0 / 7, 0.01);
  EXPECT_NEAR(f[1], 2.0 / 7, 0.01);
  EXPECT_NEAR(f[2], 4.0 / 7, 0.01);
  // Temperature 0.5 squares the odds: 1 : 4 : 16.
  Sampler cold(3, params(0.5f, 0, 1.0f, 2024));
  f = frequencies(cold, logits, 40000);
  EXPECT_NEAR(f[2], 16.0 / 21, 0.01);
  EXPECT_NEAR(f[0], 1.0 / 21, 0.01);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.0f, 0.5f};
  Sampler one(5, params(1.5f, 1, 1.0f, 9));
  for (int i = 0; i < 200; ++i) EXPECT_EQ(one.sample(logits), 1);
  // k = 2 with a tie for second place: the lower id (2) is kept, 3 is not.
  Sampler two(5, params(1.0f, 2, 1.0f, 9));
  auto f = frequencies(two, logits, 20000);
  EXPECT_EQ(f.count(0) + f.count(3) + f.count(4), 0u);
  const double e1 = std::exp(3.0), e2 = std::exp(2.0);
  EXPECT_NEAR(f[1], e1 / (e1 + e2), 0.015);  // renormalised over the two kept
  // k >= vocab is no restriction.
  Sampler all(5, params(1.0f, 5, 1.0f, 9));
  f = frequencies(all, logits, 20000);
  EXPECT_EQ(f.size(), 5u);
}

TEST(Sampler, TopPKeepsTheSmallestNucleusAboveP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (temperature 1).
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  Sampler s(4, params(1.0f, 0, 0.7f, 11));
  auto f = frequencies(s, logits, 40000);
  EXPECT_EQ(f.count(2) + f.count(3), 0u);  // 0.5 + 0.3 already exceeds 0.7
  EXPECT_NEAR(f[0], 0.5 / 0.8, 0.01);
  // Equal probabilities keep id order when sorted (glibc's qsort is a stable merge sort):
  // with p = 0.5 the nucleus of four equal tokens is ids 0, 1, 2 — never 3.
  Sampler ties(4, params(1.0f, 0, 0.5f, 11));
  f = frequencies(ties, std::vector<float>{2, 2, 2, 2}, 20000);
  EXPECT_EQ(f.count(3), 0u);
  EXPECT_NEAR(f[0], 1.0 / 3, 0.015);
  // top-k then top-p: k = 3 renormalises to 0.526, 0.316, 0.158; p = 0.6 keeps two.
  Sampler both(4, params(1.0f, 3, 0.6f, 11));
  f = frequencies(both, logits, 20000);
  EXPECT_EQ(f.count(2) + f.count(3), 0u);
}

TEST(Sampler, SeedsAreIndependentAndCopiesFork) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  auto draw = [&](Sampler s) {
    std::vector<TokenId> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits));
    return out;
  };
  const Sampler a(50, params(1.0f, 0, 0.9f, 1)), b(50, params(1.0f, 0, 0.9f, 1)), c(50, params(1.0f, 0, 0.9f, 2));
  EXPECT_EQ(draw(a), draw(b));
  EXPECT_NE(draw(a), draw(c));
  Sampler live(50, params(1.0f, 0, 0.9f, 3));
  live.sample(logits);
  const Sampler fork = live;  // same state: identical futures
  EXPECT_EQ(draw(live), draw(fork));
}

TEST(Sampler, RejectsInvalidParameters) {
  EXPECT_THROW(Sampler(4, params(-0.1f, 0, 0.9f, 1)), ConfigError);
  EXPECT_THROW(Sampler(4, params(NAN, 0, 0.9f, 1)), ConfigError);
  EXPECT_THROW(Sampler(4, params(1.0f, -1, 0.9f, 1)), ConfigError);
  EXPECT_THROW(Sampler(4, params(1.0f, 0, 1.5f, 1)), ConfigError);
  EXPECT_THROW(Sampler(4, params(1.0f, 0, -0.5f, 1)), ConfigError);
  EXPECT_THROW(Sampler(0, params(1.0f, 0, 0.9f, 1)), ConfigError);
  EXPECT_NO_THROW(Sampler(1, params(1.0f, 0, 0.9f, 1)).sample(std::vector<float>{3}));
}

// Logits with NaN or infinities (a model file's broken weights) still give a token of the
// vocabulary under every setting: the argmax, never a read past the candidates.
TEST(Sampler, NonFiniteLogitsGiveTheArgmax) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {{NAN, NAN, NAN, NAN},
                                                {0.5f, NAN, 2.0f, 1.0f},
                                                {0.5f, inf, 2.0f, inf},
                                                {-inf, -inf, -inf, -inf},
                                                {1.0f, -inf, NAN, 3.0f}};
  for (const auto& row : rows)
    for (const SamplingParams& p :
         {params(1.0f, 0, 0.0f, 7), params(0.8f, 2, 0.0f, 7), params(1.0f, 0, 0.5f, 7), params(1.0f, 3, 0.9f, 7)}) {
      Sampler s(4, p);
      const TokenId t = s.sample(row);
      EXPECT_EQ(t, Sampler::argmax(row)) << p.temperature << " " << p.top_k << " " << p.top_p;
    }
}

// `run stories260K.bin -z tok512.bin -t T -p P -s SEED -n N -i PROMPT`, sampled. The expected
// texts were produced by llama2.c run.c's sampling code (rebuilt from its source with gcc -O3;
// that build reproduces the three greedy goldens byte for byte).
TEST(Sampler, ReproducesRunCSampledTextOnStories260K) {
  PAGEDKV_REQUIRE_MODELS(dir);
  testing::ScopedKernelThreads threads(1);
  Llama2cCheckpoint model((dir / "stories260K.bin").string());
  Tokenizer tok((dir / "tok512.bin").string(), 512);
  ModelRunner runner(model);
  struct Case {
    SamplingParams params;
    int steps;
    std::string prompt, text;
  };
  const std::vector<Case> cases = {
      {params(0.8f, 0, 0.9f, 42), 96, "Once upon a time",
       "Once upon a time, there was a little boy named Timmy. Timmy loved to play with his ball and make it fun. "
       "One day, Timmy's mom asked him to take it away from the park. Timmy said, \"I want to get it back, Timmy, "
       "it's not scared of your ball. It's b"},
      {params(1.0f, 0, 0.0f, 7), 64, "Tom and Lily",
       "Tom and Lily lived in a house with a big pond. She had so much fun with her mom who liked to find no before "
       "brothers. When the stuffed anima"},
  };
  // Both requests in one batch, each with its own sampler.
  std::vector<testing::Sequence> seqs;
  for (const auto& c : cases) {
    testing::Sequence s;
    s.prompt = tok.encode(c.prompt);
    s.steps = c.steps;
    s.sampler.emplace(512, c.params);
    seqs.push_back(std::move(s));
  }
  KVArena arena(runner.kv_cache_spec(16), model.config().n_layers, 16);
  testing::generate(runner, arena, seqs, 1 << 20);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(tok.render(seqs[i].ids), cases[i].text) << i;
}

}  // namespace
}  // namespace pagedkv
