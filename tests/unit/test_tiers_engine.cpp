// End to end on stories260K: the engine with KV tiers reproduces llama2.c's goldens byte for byte
// when a prompt's prefix is served from the host tier, from the disk tier after a restart, and
// under swap preemption through host and disk; `pagedkv generate` run twice gets disk hits.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden_engine_test.h"
#include "pagedkv/engine/llama2c_run_request.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "tiers_test_support.h"

namespace pagedkv {
namespace {

using testing::TempDir;

using testing::Golden;

class TieredEngine : public testing::GoldenEngineTest {
 protected:
  // The golden's first 100 ids as the prompt (6 full blocks of 16), greedy to the golden's end.
  static GenerationRequest long_prompt(const Golden& g) {
    return llama2c_run_request({g.ids.begin(), g.ids.begin() + 100}, g.steps, greedy());
  }
  static RequestOutput run_one(LLMEngine& engine, const GenerationRequest& r) {
    engine.add_request(r);
    auto outs = engine.run_to_completion();
    EXPECT_EQ(outs.size(), 1u);
    return outs.empty() ? RequestOutput{} : outs.front();
  }
  // A request that needs every block of a small pool: evicts everything cached.
  static GenerationRequest filler(int prompt_tokens, int salt) {
    GenerationRequest f;
    f.prompt.push_back(1);
    for (int t = 1; t < prompt_tokens; ++t) f.prompt.push_back(static_cast<TokenId>(3 + (t * 37 + salt * 101) % 500));
    f.sampling.temperature = 0.0f;
    f.stop.max_tokens = 40;
    return f;
  }
};

TEST_F(TieredEngine, GoldenPrefixServedFromTheHostTier) {
  EngineConfig cfg;
  cfg.num_blocks = 24;  // 23 usable blocks: one filler evicts everything
  cfg.tiers.host_cache_bytes = 4u << 20;
  cfg.check_invariants = true;
  LLMEngine engine(*model_, cfg);
  const auto& golden = goldens_[2];
  RequestOutput first = run_one(engine, long_prompt(golden));
  EXPECT_EQ(full_ids(first), golden.ids);
  EXPECT_EQ(first.hit_tokens_by_tier, (TierHitTokens{0, 0, 0}));
  run_one(engine, filler(320, 1));
  RequestOutput again = run_one(engine, long_prompt(golden));
  EXPECT_EQ(full_ids(again), golden.ids);
  EXPECT_EQ(again.prefix_hit_tokens, 96);
  EXPECT_EQ(again.hit_tokens_by_tier, (TierHitTokens{0, 96, 0}));
  EXPECT_GT(engine.tiers()->host()->stats().stored_blocks, 0u);
  engine.check_invariants();
}

TEST_F(TieredEngine, GoldenPrefixServedFromTheDiskTierAfterARestart) {
  TempDir dir;
  EngineConfig cfg;
  cfg.tiers.disk_cache_dir = dir.str();
  cfg.tiers.disk_cache_bytes = 16u << 20;
  cfg.check_invariants = true;
  const auto& golden = goldens_[2];
  {
    LLMEngine engine(*model_, cfg);
    EXPECT_EQ(full_ids(run_one(engine, long_prompt(golden))), golden.ids);
  }  // clean shutdown: cached blocks are written to disk
  LLMEngine engine(*model_, cfg);
  EXPECT_GE(engine.tiers()->disk()->stats().rebuilt_blocks, 6u);
  RequestOutput again = run_one(engine, long_prompt(golden));
  EXPECT_EQ(full_ids(again), golden.ids);
  EXPECT_EQ(again.hit_tokens_by_tier, (TierHitTokens{0, 0, 96}));
  EXPECT_EQ(engine.tiers()->disk()->stats().corrupt_blocks, 0u);
  // Another KV layout (fp16 instead of fp32) shares the directory but never these blocks.
  EngineConfig f16 = cfg;
  f16.kv_dtype = DType::kF16;
  LLMEngine other(*model_, f16);
  EXPECT_EQ(other.tiers()->disk()->stats().rebuilt_blocks, 0u);
  RequestOutput r = run_one(other, long_prompt(golden));
  EXPECT_EQ(r.hit_tokens_by_tier.disk, 0);
}

// Eager swap copies, and lazy ones (copied only when the device cache drops a block).
TEST_F(TieredEngine, GoldensUnderSwapPreemptionThroughHostAndDisk) {
  for (const bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy swap copies" : "eager swap copies");
    TempDir dir;
    EngineConfig cfg;
    cfg.num_blocks = 24;
    cfg.swap_space_bytes = 0;
    cfg.tiers.host_cache_bytes = 3 * 16 * 5 * 2 * 4 * 8 * 4;  // 3 blocks: swaps overflow to disk
    cfg.tiers.disk_cache_dir = dir.str();
    cfg.tiers.disk_cache_bytes = 8u << 20;
    cfg.tiers.lazy_swap_copies = lazy;
    cfg.scheduler.preemption_mode = PreemptionMode::kSwap;
    cfg.scheduler.max_num_batched_tokens = 64;
    cfg.check_invariants = true;
    LLMEngine engine(*model_, cfg);
    std::map<uint64_t, size_t> which;
    for (int k = 0; k < 3; ++k) {
      GenerationRequest f = filler(40 + 30 * k, k);
      f.stop.max_tokens = 120;
      engine.add_request(f);
    }
    for (size_t i = 0; i < goldens_.size(); ++i) {
      GenerationRequest r =
          llama2c_run_request(tokenizer_->encode(goldens_[i].prompt, true, false), goldens_[i].steps, greedy());
      r.priority = 1;  // the goldens are the victims
      which[engine.add_request(r).value] = i;
    }
    int checked = 0;
    for (const RequestOutput& o : engine.run_to_completion()) {
      auto it = which.find(o.id.value);
      if (it == which.end()) continue;
      EXPECT_EQ(full_ids(o), goldens_[it->second].ids) << goldens_[it->second].name;
      EXPECT_GE(o.num_preemptions, 1);
      ++checked;
    }
    EXPECT_EQ(checked, 3);
    EXPECT_GT(engine.scheduler().stats().preemptions_swap, 0u);
    const TierStats& hs = engine.tiers()->host()->stats();
    const TierStats& ds = engine.tiers()->disk()->stats();
    EXPECT_GT(hs.swapped_out_blocks, 0u);
    EXPECT_GT(ds.swapped_out_blocks, 0u);
    if (lazy) {
      EXPECT_GT(hs.swap_copies_deferred + ds.swap_copies_deferred, 0u);
    } else {
      EXPECT_EQ(hs.swap_copies_deferred + ds.swap_copies_deferred, 0u);
    }
    EXPECT_EQ(engine.manager().num_free_blocks(), engine.manager().pool().num_usable_blocks());
    engine.check_invariants();
  }
}

TEST_F(TieredEngine, UnusableDiskDirectoryDegradesAndTheEngineKeepsServing) {
  EngineConfig cfg;
  cfg.num_blocks = 24;
  cfg.tiers.host_cache_bytes = 1u << 20;
  cfg.tiers.disk_cache_dir = "/proc/pagedkv-cannot-create-this";
  cfg.tiers.log_degraded = false;
  cfg.check_invariants = true;
  LLMEngine engine(*model_, cfg);
  EXPECT_FALSE(engine.tiers()->disk()->available());
  EXPECT_TRUE(engine.tiers()->disk()->stats().degraded);
  const auto& golden = goldens_[2];
  EXPECT_EQ(full_ids(run_one(engine, long_prompt(golden))), golden.ids);
  run_one(engine, filler(320, 2));
  RequestOutput again = run_one(engine, long_prompt(golden));
  EXPECT_EQ(full_ids(again), golden.ids);
  EXPECT_EQ(again.hit_tokens_by_tier, (TierHitTokens{0, 96, 0}));  // the host tier still works
}

TEST_F(TieredEngine, GenerateTwiceGetsDiskHitsInTheSecondProcess) {
  const char* bin = std::getenv("PAGEDKV_BIN");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "PAGEDKV_BIN is not set or not built (run through ctest with the pagedkv target built)";
  TempDir dir;
  const std::string model = (testing::models_dir() / "stories260K.bin").string();
  const std::string tok = (testing::models_dir() / "tok512.bin").string();
  const std::string cmd =
      std::string(bin) + " generate -m " + model + " -z " + tok + " -t 0 -n 120 --json --disk-cache-dir " + dir.str() +
      " -i 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park' 2>/dev/null";
  std::vector<nlohmann::json> runs;
  for (int i = 0; i < 2; ++i) {
    FILE* pipe = ::popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
    ASSERT_EQ(::pclose(pipe), 0) << out;
    runs.push_back(nlohmann::json::parse(out));
  }
  EXPECT_EQ(runs[0]["hit_tokens_by_tier"]["disk"], 0);
  EXPECT_GT(runs[1]["hit_tokens_by_tier"]["disk"].get<int>(), 0);
  EXPECT_EQ(runs[0]["token_ids"], runs[1]["token_ids"]);
}

}  // namespace
}  // namespace pagedkv
