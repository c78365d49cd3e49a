// The engine on a model with sliding-window layers (the built-in random-weight model with Gemma
// 2's layer pattern): greedy outputs with hybrid KV-cache groups (the sliding layers keep only
// their window; out-of-window table entries are the null block; prefix hits through window
// checkpoints) equal, token for token, a run that allocates every layer for every token and
// applies the window as a mask. Three requests share a prefix, so the second and third hit.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
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

// Greedy outputs of `hybrid` equal those of the same model allocating every layer for every
// token (one full-attention group; sliding layers masked to their window), with prefix caching
// on and off. Uniform: requests 2 and 3 hit the 64-token shared prefix. Hybrid: request 2 misses
// (no window of request 1 before 64) and leaves a checkpoint there, so request 3 hits.
void expect_same_outputs_as_uniform_allocation(const ModelConfig& hybrid) {
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
      EXPECT_EQ(u.hit_tokens, 128);
      EXPECT_EQ(h.hit_tokens, 64);
    }
  }
}

// vLLM's uniform-page grouping of a model's layers: which group and arena layer each one gets.
struct Layout {
  int groups, layers_per_group, padding;
  std::vector<int> group_of, arena_layer_of;
};
Layout layout_of(const ModelConfig& c) {
  Layout l{c.num_kv_cache_groups(), c.kv_arena_layers(), c.kv_padding_layers(), {}, {}};
  for (int i = 0; i < c.n_layers; ++i) {
    l.group_of.push_back(c.kv_cache_group(i));
    l.arena_layer_of.push_back(c.arena_layer(i));
  }
  return l;
}

ModelConfig layered(int n_layers, int period) {
  ModelConfig c = builtin_random_hybrid_model_config();
  c.n_layers = n_layers;
  c.sliding_window_period = period;
  return c;
}

TEST(EngineHybrid, LayersFormGroupsByVllmsUniformPageRule) {
  // Gemma 2 (alternating): one full and one sliding group, as many layers each.
  const Layout gemma2 = layout_of(layered(4, 2));
  EXPECT_EQ(gemma2.groups, 2);
  EXPECT_EQ(gemma2.layers_per_group, 2);
  EXPECT_EQ(gemma2.group_of, (std::vector<int>{1, 0, 1, 0}));
  EXPECT_EQ(gemma2.arena_layer_of, (std::vector<int>{0, 0, 1, 1}));
  // Gemma 3 (five sliding layers to one full; 7 layers: 6 slide): groups of the smaller kind's
  // count, one layer each, full first: no block carries a layer its group does not have.
  const Layout gemma3 = layout_of(layered(7, 6));
  EXPECT_EQ(gemma3.groups, 7);
  EXPECT_EQ(gemma3.layers_per_group, 1);
  EXPECT_EQ(gemma3.padding, 0);
  EXPECT_EQ(gemma3.group_of, (std::vector<int>{1, 2, 3, 4, 5, 0, 6}));
  // gemma-3-27b's shape: 52 sliding, 10 full layers -> groups of 10; 6 sliding groups, the last
  // padded by 8 layers (vLLM's 7 groups).
  const ModelConfig g27 = layered(62, 6);
  const Layout big = layout_of(g27);
  EXPECT_EQ(big.groups, 7);
  EXPECT_EQ(big.layers_per_group, 10);
  EXPECT_EQ(big.padding, 8);
  const std::vector<KVCacheGroupSpec> groups = g27.kv_cache_groups(16);
  ASSERT_EQ(groups.size(), 7u);
  EXPECT_EQ(groups[0].spec.kind, AttentionKind::kFull);
  EXPECT_EQ(groups[0].num_layers, 10);
  for (size_t g = 1; g < 7; ++g) {
    EXPECT_EQ(groups[g].spec.kind, AttentionKind::kSlidingWindow);
    EXPECT_EQ(groups[g].num_layers, g < 6 ? 10 : 2);
  }
  // Layer 5 is the first full layer, layer 11 the second; layer 12 is the eleventh sliding layer
  // (after 0-4 and 6-10), the first of the second sliding group.
  EXPECT_EQ(big.group_of[5], 0);
  EXPECT_EQ(big.arena_layer_of[11], 1);
  EXPECT_EQ(big.group_of[10], 1);
  EXPECT_EQ(big.arena_layer_of[10], 9);
  EXPECT_EQ(big.group_of[12], 2);
  EXPECT_EQ(big.arena_layer_of[12], 0);
  // Every (group, arena layer) holds at most one layer.
  std::set<std::pair<int, int>> seen;
  for (int l = 0; l < 62; ++l) EXPECT_TRUE(seen.insert({big.group_of[l], big.arena_layer_of[l]}).second) << l;
  // One full layer to 40 sliding would make 41 groups of one: fuller groups instead, at most the
  // manager's 16 (groups of 3: 1 + 14).
  const Layout many = layout_of(layered(41, 41));
  EXPECT_EQ(many.layers_per_group, 3);
  EXPECT_EQ(many.groups, 15);
  EXPECT_LE(many.groups, kMaxKVCacheGroups);
  // One kind, or uniform allocation: one group of every layer.
  ModelConfig uniform = layered(7, 6);
  uniform.uniform_kv_allocation = true;
  EXPECT_EQ(layout_of(uniform).groups, 1);
  EXPECT_EQ(layout_of(uniform).layers_per_group, 7);
  EXPECT_EQ(layout_of(uniform).arena_layer_of, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(EngineHybrid, Gemma3PatternGroupsHoldOnlyTheirLayersAndMatchUniformAllocation) {
  // Seven layers, every sixth full: with the old two-group layout (six layers a block) a full
  // group's blocks carried five empty layers; now a block is one layer's page.
  const ModelConfig hybrid = layered(7, 6);
  expect_same_outputs_as_uniform_allocation(hybrid);
  auto model = make_random_model(hybrid, 11);
  EngineConfig ec;
  ec.block_size = 16;
  ec.num_blocks = 64;
  LLMEngine engine(*model, ec);
  EXPECT_EQ(engine.manager().num_groups(), 7);
  EXPECT_NE(engine.describe().find("KV-cache groups: 7 of 1 layers each"), std::string::npos) << engine.describe();
}

TEST(EngineHybrid, HybridGroupsGiveTheSameGreedyOutputsAsUniformAllocationWithAMask) {
  const ModelConfig hybrid = builtin_random_hybrid_model_config();
  ASSERT_EQ(hybrid.num_kv_cache_groups(), 2);
  expect_same_outputs_as_uniform_allocation(hybrid);
  // Not vacuous: without the window (every layer full attention) the outputs differ.
  ModelConfig dense = hybrid;
  dense.sliding_window = 0;
  EXPECT_NE(generate(dense, true).outputs, generate(hybrid, true).outputs);
}

}  // namespace
}  // namespace pagedkv
