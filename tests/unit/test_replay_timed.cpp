// Timed replay: the engine's scheduler under a step-time cost model, on a simulated clock.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "pagedkv/core/error.h"
#include "pagedkv/replay/timed_replay.h"
#include "pagedkv/replay/trace_reader.h"

namespace pagedkv {
namespace {

// Prompts of explicit tokens: {arrival ms, prompt length, output length, first token value}.
struct Spec {
  double ms;
  int prompt;
  int output;
  int first = 0;
};

Trace token_trace(const std::vector<Spec>& specs) {
  std::string text;
  int unique = 1000000;
  for (const Spec& s : specs) {
    text += "{\"timestamp\": " + std::to_string(s.ms) + ", \"output_length\": " + std::to_string(s.output) +
            ", \"tokens\": [";
    for (int i = 0; i < s.prompt; ++i) {
      if (i) text += ",";
      // A shared run from `first` for requests that set it, unique tokens otherwise.
      text += std::to_string(s.first ? s.first + i : unique++);
    }
    text += "]}\n";
  }
  std::istringstream in(text);
  return read_token_trace(in, "timed");
}

// 10 ms a step plus 1 ms per 10 prefill tokens; nothing else.
StepCostModel simple_cost() {
  StepCostModel m;
  m.name = "test";
  m.step_overhead_ms = 10;
  m.prefill_tokens_per_s = 10000;
  m.prefill_attention_ms_per_mpair = 0;
  m.decode_ms_per_seq = 0;
  m.decode_attention_ms_per_ktoken = 0;
  m.swap_ms_per_block = 0;
  return m;
}

TimedReplayConfig config(int64_t capacity_blocks) {
  TimedReplayConfig c;
  c.block_size = 16;
  c.capacity_blocks = capacity_blocks;
  c.cost = simple_cost();
  c.scheduler.max_num_batched_tokens = 2048;
  c.timeline_interval_s = 0.01;
  return c;
}

TEST(TimedReplay, OneRequestFollowsTheCostModel) {
  const TimedReplayResult r = replay_timed(token_trace({{0, 1000, 4}}), config(1000));
  ASSERT_EQ(r.finished, 1);
  // Prefill: 10 ms + 1000 tokens at 10k tok/s = 110 ms, then 3 decode steps of 10 ms.
  EXPECT_NEAR(r.ttft.p50, 0.110, 1e-9);
  EXPECT_NEAR(r.tpot.p50, 0.010, 1e-9);
  EXPECT_NEAR(r.e2e.p50, 0.140, 1e-9);
  EXPECT_NEAR(r.queueing.p50, 0.0, 1e-12);
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.output_tokens, 4);
  EXPECT_EQ(r.prefill_tokens, 1000);
  EXPECT_FALSE(r.timeline.empty());
}

TEST(TimedReplay, LongPromptsArePrefilledInChunks) {
  const TimedReplayResult r = replay_timed(token_trace({{0, 5000, 1}}), config(1000));
  // Budget 2048: chunks of 2048, 2048, 904 -> 3 steps of overhead plus 500 ms of prefill.
  EXPECT_EQ(r.steps, 3);
  EXPECT_NEAR(r.ttft.p50, 0.530, 1e-9);
}

TEST(TimedReplay, LaterRequestsHitTheCachedPrefix) {
  const TimedReplayResult r = replay_timed(token_trace({{0, 640, 2, 1}, {1000, 640, 2, 1}}), config(1000));
  ASSERT_EQ(r.finished, 2);
  // The second request finds 639 tokens' worth of full blocks: 39 blocks = 624 tokens.
  EXPECT_EQ(r.hit_tokens, 624);
  EXPECT_EQ(r.prefill_tokens, 640 + 16);
  EXPECT_LT(r.ttft.p50, 0.1);
}

TEST(TimedReplay, OverloadQueuesAndPreemptsButFinishesEverything) {
  std::vector<Spec> specs;
  for (int i = 0; i < 40; ++i) specs.push_back({static_cast<double>(i), 300, 200});
  TimedReplayConfig c = config(300);  // 4,800 tokens: a handful of requests at a time
  c.scheduler.admit_high_watermark = 1.0;  // admit until full, so decode growth must preempt
  c.scheduler.admit_low_watermark = 1.0;
  const TimedReplayResult r = replay_timed(token_trace(specs), c);
  EXPECT_EQ(r.finished, 40);
  EXPECT_EQ(r.output_tokens, 40 * 200);
  EXPECT_GT(r.queueing.p90, 0.1);
  EXPECT_GT(r.preemptions_recompute, 0u);
  EXPECT_GT(r.prefill_tokens, 40 * 300);  // recomputation after preemption
  EXPECT_GT(r.max_pool_usage, 0.9);
}

TEST(TimedReplay, RejectsPromptsLargerThanTheCache) {
  const TimedReplayResult r = replay_timed(token_trace({{0, 100, 1}, {0, 5000, 1}}), config(100));
  EXPECT_EQ(r.rejected, 1);
  EXPECT_EQ(r.finished, 1);
}

TEST(TimedReplay, TimeScaleStretchesArrivals) {
  const Trace t = token_trace({{0, 100, 1}, {1000, 100, 1}});
  TimedReplayConfig c = config(100);
  const double base = replay_timed(t, c).duration_s;
  c.time_scale = 3;
  EXPECT_NEAR(replay_timed(t, c).duration_s - base, 2.0, 1e-9);
}

TEST(StepCostModel, PresetsAndValidation) {
  EXPECT_EQ(step_cost_preset("llama3-8b-h100").name, "llama3-8b-h100");
  EXPECT_THROW(step_cost_preset("gpt-9"), ConfigError);
  for (const StepCostModel& m : step_cost_presets()) EXPECT_NO_THROW(m.validate()) << m.name;
  StepCostModel m = simple_cost();
  m.prefill_tokens_per_s = 0;
  EXPECT_THROW(m.validate(), ConfigError);
  StepWork w;
  w.prefill_tokens = 500;
  EXPECT_NEAR(simple_cost().step_seconds(w), 0.060, 1e-12);
}

// Roofline overlap: the GEMMs hide under the weight read until they take longer than it;
// attention's KV read still adds.
TEST(StepCostModel, OverlapWeightReadTakesTheLongerOfTheTwo) {
  StepCostModel m = simple_cost();  // 10 ms weight read, 0.1 ms per prefill token
  m.decode_ms_per_seq = 0.1;
  m.decode_attention_ms_per_ktoken = 1.0;
  m.overlap_weight_read = true;
  StepWork w;
  w.decode_seqs = 40;  // 4 ms of GEMM: hidden
  w.decode_context_tokens = 2000;
  EXPECT_NEAR(m.step_seconds(w), 0.012, 1e-12);
  w.prefill_tokens = 100;  // 4 + 10 ms of GEMM: now longer than the weight read
  EXPECT_NEAR(m.step_seconds(w), 0.016, 1e-12);
  m.overlap_weight_read = false;
  EXPECT_NEAR(m.step_seconds(w), 0.026, 1e-12);
  EXPECT_TRUE(step_cost_preset("opt-13b-a100").overlap_weight_read);
}

}  // namespace
}  // namespace pagedkv
