// The engine on a model with sliding-window layers (the built-in random-weight model with Gemma
// 2's layer pattern): greedy outputs with hybrid KV-cache groups (the sliding layers keep only
// their window; out-of-window table entries are the null block; prefix hits through window
// checkpoints) equal, token for token, a run that allocates every layer for every token and
// applies the window as a mask. Three requests share a prefix, so the second and third hit.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/random_model.h"

namespace pagedkv {
namespace {

struct GreedyRun {
  std::map<uint64_t, std::vector<TokenId>> outputs;  // by request id
  int hit_tokens = 0;
};

GreedyRun generate(const ModelConfig& config, bool prefix_caching) {
  auto model = make_random_model(config, 11);
  EngineConfig ec;
  ec.block_size = 16;
  ec.num_blocks = 200;
  ec.check_invariants = true;
  ec.enable_prefix_caching = prefix_caching;
  LLMEngine engine(*model, ec);
  std::vector<TokenId> shared;
  for (int t = 0; t < 70; ++t) shared.push_back(static_cast<TokenId>(3 + (t * 53) % 500));
  GreedyRun run;
  for (int r = 0; r < 3; ++r) {
    GenerationRequest g;
    g.prompt = shared;
    for (int t = 0; t < 20 + 7 * r; ++t) g.prompt.push_back(static_cast<TokenId>(3 + (t * 31 + r * 97) % 500));
    g.sampling.temperature = 0.0f;
    g.stop.max_tokens = 48;
    engine.add_request(g);
    // One at a time, so that later requests find the earlier ones' blocks cached.
    for (const RequestOutput& o : engine.run_to_completion()) {
      if (!o.finished) continue;
      run.outputs[o.id.value] = o.output;
      run.hit_tokens += o.prefix_hit_tokens;
    }
  }
  return run;
}

TEST(EngineHybrid, HybridGroupsGiveTheSameGreedyOutputsAsUniformAllocationWithAMask) {
  const ModelConfig hybrid = builtin_random_hybrid_model_config();
  ASSERT_EQ(hybrid.num_kv_cache_groups(), 2);
  ModelConfig uniform = hybrid;
  uniform.uniform_kv_allocation = true;
  ASSERT_EQ(uniform.num_kv_cache_groups(), 1);
  ASSERT_EQ(uniform.kv_cache_groups(16).front().spec.kind, AttentionKind::kFull);
  for (const bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    const GreedyRun h = generate(hybrid, caching);
    const GreedyRun u = generate(uniform, caching);
    ASSERT_EQ(h.outputs.size(), 3u);
    EXPECT_EQ(h.outputs, u.outputs);
    for (const auto& [id, out] : h.outputs) EXPECT_EQ(out.size(), 48u) << "request " << id;
    if (caching) {
      // Uniform: requests 2 and 3 hit the 64-token shared prefix. Hybrid: request 2 misses (no
      // window of request 1 before 64) and leaves a checkpoint there, so request 3 hits.
      EXPECT_EQ(u.hit_tokens, 128);
      EXPECT_EQ(h.hit_tokens, 64);
    }
  }
  // Not vacuous: without the window (every layer full attention) the outputs differ.
  ModelConfig dense = hybrid;
  dense.sliding_window = 0;
  EXPECT_NE(generate(dense, true).outputs, generate(hybrid, true).outputs);
}

}  // namespace
}  // namespace pagedkv
