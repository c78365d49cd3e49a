// The engine with an int8 or fp8 KV cache: batching, block sizes, prefix caching, preemption by
// recompute and by swap, and copy-on-write under parallel sampling all leave the greedy outputs
// byte-identical to the same format's run of each golden prompt alone, without caching. The
// scales travel inside the blocks, and a token's row is quantized from that row alone, so none
// of these may change a single token. (Against the f32 goldens themselves the quantized runs
// may differ: docs/quantized_kv.md measures by how much.)
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "golden_engine_test.h"
#include "pagedkv/engine/llama2c_run_request.h"
#include "pagedkv/engine/llm_engine.h"

namespace pagedkv {
namespace {

using testing::Golden;

class QuantizedKVEngine : public testing::GoldenEngineTest, public ::testing::WithParamInterface<DType> {
 protected:
  GenerationRequest request_for(const Golden& g, int n = 1) const {
    GenerationRequest r = llama2c_run_request(tokenizer_->encode(g.prompt, true, false), g.steps, greedy());
    r.n = n;
    return r;
  }

  EngineConfig config() const {
    EngineConfig cfg;
    cfg.kv_dtype = GetParam();
    cfg.check_invariants = true;
    return cfg;
  }

  // Each golden prompt alone, no prefix caching, a pool that never preempts.
  std::vector<std::vector<TokenId>> reference() const {
    std::vector<std::vector<TokenId>> ids;
    for (const Golden& g : goldens_) {
      EngineConfig cfg = config();
      cfg.enable_prefix_caching = false;
      LLMEngine engine(*model_, cfg);
      engine.add_request(request_for(g));
      auto outs = engine.run_to_completion();
      EXPECT_EQ(outs.size(), 1u);
      ids.push_back(full_ids(outs.at(0)));
    }
    return ids;
  }

  // All goldens in one engine behind `fillers` competing requests; returns each golden's ids.
  std::vector<std::vector<TokenId>> run_all(const EngineConfig& cfg, int fillers, int golden_priority = 0) const {
    LLMEngine engine(*model_, cfg);
    add_fillers(engine, fillers);
    std::map<uint64_t, size_t> which;
    for (size_t i = 0; i < goldens_.size(); ++i) {
      GenerationRequest r = request_for(goldens_[i]);
      r.priority = golden_priority;
      which[engine.add_request(r).value] = i;
    }
    std::vector<std::vector<TokenId>> ids(goldens_.size());
    for (const RequestOutput& o : engine.run_to_completion()) {
      auto it = which.find(o.id.value);
      if (it == which.end()) continue;
      ids[it->second] = full_ids(o);
      if (golden_priority > 0) {
        EXPECT_GE(o.num_preemptions, 1);
      }
    }
    EXPECT_EQ(engine.manager().num_free_blocks(), engine.manager().pool().num_usable_blocks());
    return ids;
  }
};

TEST_P(QuantizedKVEngine, BatchingAndBlockSizesChangeNoToken) {
  const auto ref = reference();
  for (int bs : {1, 16, 64}) {
    EngineConfig cfg = config();
    cfg.block_size = bs;
    cfg.kv_cache_bytes = 8u << 20;
    EXPECT_EQ(run_all(cfg, 3), ref) << "block size " << bs;
  }
}

TEST_P(QuantizedKVEngine, PrefixCacheHitsReuseQuantizedBlocks) {
  const auto ref = reference();
  // The golden prompts are shorter than a block: re-run the first 100 tokens of each reference
  // as the prompt, twice; the second run hits 96 cached tokens and must continue identically.
  for (size_t i = 0; i < goldens_.size(); ++i) {
    const std::vector<TokenId>& r = ref[i];
    if (r.size() < 120) continue;
    LLMEngine engine(*model_, config());
    const GenerationRequest req = llama2c_run_request({r.begin(), r.begin() + 100}, goldens_[i].steps, greedy());
    for (int expected_hit : {0, 96}) {
      engine.add_request(req);
      auto outs = engine.run_to_completion();
      ASSERT_EQ(outs.size(), 1u);
      EXPECT_EQ(outs[0].prefix_hit_tokens, expected_hit);
      EXPECT_EQ(full_ids(outs[0]), r) << goldens_[i].name;
    }
  }
}

TEST_P(QuantizedKVEngine, PreemptionByRecomputeAndBySwapChangesNoToken) {
  const auto ref = reference();
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    EngineConfig cfg = config();
    cfg.block_size = 16;
    cfg.num_blocks = 24;
    cfg.swap_space_bytes = 2u << 20;
    cfg.scheduler.preemption_mode = mode;
    cfg.scheduler.max_num_batched_tokens = 64;
    EXPECT_EQ(run_all(cfg, 3, /*golden_priority=*/1), ref) << preemption_mode_name(mode);
  }
}

TEST_P(QuantizedKVEngine, ParallelGreedySamplesShareBlocksCopyOnWrite) {
  const auto ref = reference();
  for (size_t i = 0; i < goldens_.size(); ++i) {
    LLMEngine engine(*model_, config());
    engine.add_request(request_for(goldens_[i], 3));
    const auto outs = engine.run_to_completion();
    ASSERT_EQ(outs.size(), 3u);
    for (const RequestOutput& o : outs) EXPECT_EQ(full_ids(o), ref[i]) << goldens_[i].name;
    EXPECT_GT(engine.stats().cow_copies, 0u);  // the shared partial block was copied on first write
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedKVEngine, ::testing::Values(DType::kInt8, DType::kFP8),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace pagedkv
