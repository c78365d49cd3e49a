// Choosing the next token from a row of logits: greedy, temperature, top-k and top-p (nucleus),
// with a per-request seed.
//
// With top_k == 0 this is llama2.c run.c's sampler, operation for operation, so a request with
// the same temperature, top_p and seed draws the same tokens as `run -t T -p P -s SEED`:
//   - temperature == 0: argmax, ties to the lowest id; the generator is not advanced.
//   - otherwise: logits / temperature, softmax (max-subtracted, float, in id order), one coin
//     = random_f32() per call, then
//       top_p <= 0 or >= 1: inverse-CDF over all ids in id order (run.c sample_mult);
//       else: keep ids with p >= (1 - top_p) / (vocab - 1), sort by p descending (ties: lower id
//             first, as glibc's stable merge-sort qsort leaves them), cut after the cumulative
//             probability first exceeds top_p, and pick by coin * that cumulative (sample_topp).
// top_k > 0 (not in run.c) keeps the k most probable ids (ties to the lower id), renormalises
// them, then applies top-p over those the same way.
//
// min_p > 0 (vLLM's) then zeroes the tokens whose probability is below min_p times the most
// probable one's and renormalises, before top-k / top-p. The logits adjustments that come before
// temperature (logit bias, penalties) are logits_processing.h's, applied by the caller.
//
// The generator is run.c's xorshift64* (state ^= state >> 12, << 25, >> 27; output
// (state * 0x2545F4914F6CDD1D) >> 32; random_f32 = (u32 >> 8) / 2^24), seeded with `seed`.
// xorshift needs a non-zero state; seed 0 is replaced by kZeroSeedReplacement (run.c instead
// substitutes the wall-clock time for 0 — a caller that wants that passes time(nullptr)).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy; must be finite and >= 0
  int top_k = 0;  // 0 = off; else keep the k most probable tokens
  float top_p = 1.0f;  // nucleus mass in [0, 1]; 0 or 1 = off (run.c's convention)
  uint64_t seed = 0;
  float min_p = 0.0f;  // in [0, 1]; 0 = off
  // Applied to the logits before temperature (logits_processing.h), as OpenAI and vLLM define them.
  std::vector<std::pair<TokenId, float>> logit_bias;  // added to a token's logit
  float presence_penalty = 0.0f;  // subtracted from each token the output already holds
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the output
  float repetition_penalty = 1.0f;  // a prompt or output token's logit: / p when positive, x p when not

  bool greedy() const { return temperature == 0.0f; }
  // Whether any adjustment before temperature is on (else the logits are sampled as they are).
  bool adjusts_logits() const {
    return !logit_bias.empty() || presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
  void validate() const;  // throws ConfigError naming the bad field
};

class Sampler {
 public:
  static constexpr uint64_t kZeroSeedReplacement = 0x9E3779B97F4A7C15ull;

  // Throws ConfigError for a non-positive vocab_size or invalid params.
  Sampler(int vocab_size, const SamplingParams& params);

  // Picks the next token from `logits` (vocab_size floats). Advances the generator by one draw
  // unless greedy. Throws UsageError if logits has the wrong size.
  TokenId sample(std::span<const float> logits);

  const SamplingParams& params() const { return params_; }
  // The generator state: copy a Sampler to fork a request with an identical future.
  uint64_t rng_state() const { return rng_state_; }

  // Index of the largest value; the lowest index on ties (run.c sample_argmax).
  static TokenId argmax(std::span<const float> values);
  // run.c's random_f32 on `state` (advances it): a float in [0, 1) with 24 random bits.
  static float random_f32(uint64_t& state);

 private:
  struct ProbIndex {
    float prob;
    TokenId index;
  };
  TokenId sample_top_p(float coin, float top_p);
  TokenId sample_top_k(float coin);
  TokenId sample_nucleus(float coin, float top_p) const;

  int vocab_size_;
  SamplingParams params_;
  uint64_t rng_state_;
  std::vector<float> probs_;  // scratch: softmax of the scaled logits
  std::vector<ProbIndex> candidates_;  // scratch: sorted top-p / top-k candidates
};

}  // namespace pagedkv
