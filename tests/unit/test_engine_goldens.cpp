// End to end: the serving engine on the real stories260K checkpoint must reproduce llama2.c's
// golden outputs byte for byte, however the requests are batched, cached, chunked or preempted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "golden_engine_test.h"
#include "pagedkv/core/error.h"
#include "pagedkv/engine/llama2c_run_request.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv {
namespace {

using testing::Golden;

class EngineGoldens : public testing::GoldenEngineTest {
 protected:
  static GenerationRequest request_for(const Golden& g, int n = 1) {
    GenerationRequest r = llama2c_run_request(tokenizer_->encode(g.prompt, true, false), g.steps, greedy());
    r.n = n;
    return r;
  }
  // Runs the goldens (plus `extra` filler requests) through one engine and checks every golden.
  static std::vector<RequestOutput> run_and_check(EngineConfig cfg, int extra = 0, int golden_priority = 0) {
    cfg.check_invariants = true;
    LLMEngine engine(*model_, cfg);
    std::map<uint64_t, size_t> which;
    add_fillers(engine, extra);
    for (size_t i = 0; i < goldens_.size(); ++i) {
      GenerationRequest r = request_for(goldens_[i]);
      r.priority = golden_priority;
      which[engine.add_request(r).value] = i;
    }
    std::vector<RequestOutput> outs = engine.run_to_completion();
    std::vector<RequestOutput> golden_outs;
    for (const RequestOutput& o : outs) {
      auto it = which.find(o.id.value);
      if (it == which.end()) continue;
      EXPECT_EQ(full_ids(o), goldens_[it->second].ids) << goldens_[it->second].name;
      golden_outs.push_back(o);
    }
    EXPECT_EQ(golden_outs.size(), goldens_.size());
    // Everything is released at the end.
    EXPECT_EQ(engine.manager().num_free_blocks(), engine.manager().pool().num_usable_blocks());
    engine.check_invariants();
    return golden_outs;
  }
};

TEST_F(EngineGoldens, TextMatchesGoldenFilesAlone) {
  for (const Golden& g : goldens_) {
    LLMEngine engine(*model_, EngineConfig{});
    engine.add_request(request_for(g));
    auto outs = engine.run_to_completion();
    ASSERT_EQ(outs.size(), 1u);
    std::vector<TokenId> ids = outs[0].prompt;
    ids.insert(ids.end(), outs[0].output.begin(), outs[0].output.end());
    EXPECT_EQ(tokenizer_->render(ids) + "\n", testing::read_text(testing::models_dir() / "golden" / (g.name + ".txt")))
        << g.name;
  }
}

TEST_F(EngineGoldens, BatchedWithOthersAtBlockSizes1_16_64) {
  for (int bs : {1, 16, 64}) {
    EngineConfig cfg;
    cfg.block_size = bs;
    cfg.kv_cache_bytes = 8u << 20;
    run_and_check(cfg, 3);
  }
}

TEST_F(EngineGoldens, PrefixCachingOnAndOff) {
  for (bool caching : {true, false}) {
    EngineConfig cfg;
    cfg.enable_prefix_caching = caching;
    run_and_check(cfg, 2);
  }
  // The golden prompts are shorter than a block, so use the first 100 golden tokens as the
  // prompt: the continuation must still be the golden, and a second request hits 96 tokens.
  EngineConfig cfg;
  cfg.check_invariants = true;
  LLMEngine engine(*model_, cfg);
  const Golden& g = goldens_[2];
  const GenerationRequest r = llama2c_run_request({g.ids.begin(), g.ids.begin() + 100}, g.steps, greedy());
  for (int expected_hit : {0, 96}) {
    engine.add_request(r);
    auto outs = engine.run_to_completion();
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].prefix_hit_tokens, expected_hit);
    EXPECT_EQ(full_ids(outs[0]), g.ids);
  }
}

// Requests decoding together over the same cached blocks: the attention kernel groups them
// (cascade attention, the shared blocks read once per step for all of them; from 256 shared
// tokens on). A 300-token prompt (a golden's ids, then its start again) run alone, then by three
// requests at once that hit its 288 cached tokens (18 whole blocks), then as four greedy samples
// (forked: the same blocks): every output is the lone run's.
TEST_F(EngineGoldens, RequestsSharingCachedBlocksDecodeTogether) {
  EngineConfig cfg;
  cfg.check_invariants = true;
  LLMEngine engine(*model_, cfg);
  const Golden& g = goldens_[2];
  std::vector<TokenId> prompt = g.ids;
  prompt.insert(prompt.end(), g.ids.begin() + 1, g.ids.begin() + 1 + static_cast<std::ptrdiff_t>(300 - prompt.size()));
  ASSERT_EQ(prompt.size(), 300u);
  const GenerationRequest r = llama2c_run_request(prompt, 340, greedy());
  engine.add_request(r);
  auto first = engine.run_to_completion();
  ASSERT_EQ(first.size(), 1u);
  const std::vector<TokenId> alone = full_ids(first[0]);
  ASSERT_GT(first[0].output.size(), 10u);
  for (int i = 0; i < 3; ++i) engine.add_request(r);
  auto outs = engine.run_to_completion();
  ASSERT_EQ(outs.size(), 3u);
  for (const RequestOutput& o : outs) {
    EXPECT_EQ(o.prefix_hit_tokens, 288);
    EXPECT_EQ(full_ids(o), alone);
  }
  GenerationRequest samples = r;
  samples.n = 4;
  engine.add_request(samples);
  outs = engine.run_to_completion();
  ASSERT_EQ(outs.size(), 4u);
  for (const RequestOutput& o : outs) EXPECT_EQ(full_ids(o), alone);
  // With cascade attention off (EngineConfig::cascade_attention, serve's --no-cascade-attention)
  // each request reads its own table: the same outputs.
  cfg.cascade_attention = false;
  LLMEngine plain(*model_, cfg);
  plain.add_request(r);
  (void)plain.run_to_completion();
  for (int i = 0; i < 3; ++i) plain.add_request(r);
  outs = plain.run_to_completion();
  ASSERT_EQ(outs.size(), 3u);
  for (const RequestOutput& o : outs) EXPECT_EQ(full_ids(o), alone);
}

TEST_F(EngineGoldens, SmallPoolPreemptsEachGoldenWithRecomputeAndWithSwap) {
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    EngineConfig cfg;
    cfg.block_size = 16;
    cfg.num_blocks = 24;  // 23 usable blocks = 368 tokens for ~3 x 257-token goldens + fillers
    cfg.swap_space_bytes = 2u << 20;
    cfg.scheduler.preemption_mode = mode;
    cfg.scheduler.max_num_batched_tokens = 64;  // chunked prefill too
    // Goldens at lower priority than the fillers: they are the preemption victims.
    auto outs = run_and_check(cfg, 3, /*golden_priority=*/1);
    for (const RequestOutput& o : outs) EXPECT_GE(o.num_preemptions, 1) << preemption_mode_name(mode);
  }
}

TEST_F(EngineGoldens, ParallelSamplingGreedyGivesIdenticalCopies) {
  EngineConfig cfg;
  cfg.check_invariants = true;
  LLMEngine engine(*model_, cfg);
  engine.add_request(request_for(goldens_[0], 4));
  auto outs = engine.run_to_completion();
  ASSERT_EQ(outs.size(), 4u);
  std::set<int> samples;
  for (const RequestOutput& o : outs) {
    EXPECT_EQ(full_ids(o), goldens_[0].ids);
    samples.insert(o.sample_index);
  }
  EXPECT_EQ(samples, (std::set<int>{0, 1, 2, 3}));
  EXPECT_GT(engine.stats().cow_copies, 0u);  // the shared partial block was copied on first write
}

TEST_F(EngineGoldens, ParallelSamplingWithTemperatureDiverges) {
  EngineConfig cfg;
  cfg.check_invariants = true;
  LLMEngine engine(*model_, cfg);
  GenerationRequest r = request_for(goldens_[2], 3);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  engine.add_request(r);
  auto outs = engine.run_to_completion();
  ASSERT_EQ(outs.size(), 3u);
  std::set<std::vector<TokenId>> distinct;
  for (const RequestOutput& o : outs) distinct.insert(o.output);
  EXPECT_GT(distinct.size(), 1u);
  EXPECT_GT(engine.stats().cow_copies, 0u);
}

TEST_F(EngineGoldens, CancellingMidFlightLeavesThePoolAsBefore) {
  EngineConfig cfg;
  cfg.enable_prefix_caching = false;
  cfg.check_invariants = true;
  LLMEngine engine(*model_, cfg);
  const int free_before = engine.manager().num_free_blocks();
  std::vector<RequestId> ids;
  for (const Golden& g : goldens_) ids.push_back(engine.add_request(request_for(g)));
  GenerationRequest longer = request_for(goldens_[0], 2);
  ids.push_back(engine.add_request(longer));
  for (int s = 0; s < 7; ++s) engine.step();  // some mid-prefill, some decoding
  for (RequestId id : ids) engine.abort_request(id);
  engine.step();
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(engine.manager().num_free_blocks(), free_before);
  EXPECT_EQ(engine.manager().num_requests(), 0);
  engine.check_invariants();
}

TEST_F(EngineGoldens, RejectsBadInputButKeepsServing) {
  LLMEngine engine(*model_, EngineConfig{});
  GenerationRequest bad = request_for(goldens_[0]);
  bad.prompt.push_back(9999);
  EXPECT_THROW(engine.add_request(bad), UsageError);
  engine.add_request(request_for(goldens_[0]));
  auto outs = engine.run_to_completion();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(full_ids(outs[0]), goldens_[0].ids);
}

}  // namespace
}  // namespace pagedkv
