// Hybrid models' KV memory: vLLM's uniform-page grouping of layers into KV-cache groups, and one
// request's KV bytes with hybrid groups and with uniform allocation. Golden numbers computed by
// hand from the published configs (docs/hybrid.md): bf16, block 16.
#include <gtest/gtest.h>

#include "pagedkv/core/error.h"
#include "pagedkv/memory/hybrid_model.h"
#include "pagedkv/memory/kv_memory.h"

namespace pagedkv {
namespace {

const HybridModelShape& preset(std::string_view name) {
  const HybridModelShape* m = find_hybrid_model_preset(name);
  EXPECT_NE(m, nullptr) << name;
  return *m;
}

KVCacheSpec layer(AttentionKind kind, int window = 0) {
  return KVCacheSpec{.kind = kind,
                     .block_size = 16,
                     .num_kv_heads = 8,
                     .head_dim = 64,
                     .dtype = DType::kBF16,
                     .sliding_window = window};
}

TEST(MemoryHybrid, PresetsFollowThePublishedLayerPatterns) {
  EXPECT_EQ(hybrid_model_presets().size(), 4u);
  const HybridModelShape& g3 = preset("GEMMA-3-27B");
  int sliding = 0;
  for (int l = 0; l < g3.num_layers; ++l) sliding += g3.is_sliding_layer(l) ? 1 : 0;
  EXPECT_EQ(sliding, 52) << "62 layers, every 6th full";
  EXPECT_FALSE(g3.is_sliding_layer(5));
  EXPECT_TRUE(preset("gpt-oss-20b").is_sliding_layer(0)) << "gpt-oss layer_types start with sliding_attention";
  EXPECT_FALSE(preset("gemma-2-27b").is_sliding_layer(1));
  EXPECT_EQ(find_hybrid_model_preset("llama-2-7b"), nullptr);
}

TEST(MemoryHybrid, GroupingRuleOfVllm) {
  // Equal counts: one group per kind.
  std::vector<KVCacheSpec> layers;
  for (int l = 0; l < 24; ++l)
    layers.push_back(l % 2 ? layer(AttentionKind::kFull) : layer(AttentionKind::kSlidingWindow, 128));
  auto g = group_layers_uniform_page(layers);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].spec.kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(g[0].num_layers, 12);
  EXPECT_EQ(g[1].padded_layers, 12);
  // 12 and 13 (gpt-oss-20b with a draft layer): 13 < 1.25 x 12, so groups of 13, one padding layer.
  layers.push_back(layer(AttentionKind::kFull));
  g = group_layers_uniform_page(layers);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].num_layers, 12);
  EXPECT_EQ(g[0].padded_layers, 13);
  // 52 sliding and 10 full (Gemma 3): groups of 10, the sliding layers in 6 groups, 8 padding.
  const HybridKVPlan p = plan_hybrid_kv(preset("gemma-3-27b"), 16, DType::kBF16, 32768);
  ASSERT_EQ(p.groups.size(), 7u);
  EXPECT_EQ(p.groups[5].num_layers, 2);
  EXPECT_EQ(p.groups[5].padded_layers, 10);
  EXPECT_EQ(p.padding_layers, 8);
  EXPECT_NEAR(p.padding_waste, 8.0 / 52.0, 1e-12);
  EXPECT_THROW(group_layers_uniform_page({}), ConfigError);
  std::vector<KVCacheSpec> mixed{layer(AttentionKind::kFull), layer(AttentionKind::kFull)};
  mixed[1].block_size = 32;
  EXPECT_THROW(group_layers_uniform_page(mixed), ConfigError);
}

// Layers of different KV bytes per token: block sizes scaled so every page is the largest.
TEST(MemoryHybrid, BlockSizesScaleSoPagesMatch) {
  // Full layers 8 heads x 64 (bf16: 2,048 B a token), sliding layers 2 heads x 64 (512 B):
  // sliding blocks of 64 tokens fill the full layers' 32,768-byte page exactly.
  std::vector<KVCacheSpec> layers;
  for (int l = 0; l < 8; ++l) {
    KVCacheSpec s = l % 2 ? layer(AttentionKind::kFull) : layer(AttentionKind::kSlidingWindow, 128);
    if (s.kind == AttentionKind::kSlidingWindow) s.num_kv_heads = 2;
    layers.push_back(s);
  }
  const auto unified = unify_page_size(layers);
  EXPECT_EQ(unified[0].block_size, 64);
  EXPECT_EQ(unified[1].block_size, 16);
  EXPECT_EQ(common_page_bytes(unified), 32768u);
  auto g = group_layers_uniform_page(layers);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].spec.block_size, 64);
  EXPECT_EQ(g[0].page_padding_bytes, 0u);
  EXPECT_EQ(g[0].spec.bytes_per_block_per_layer(), g[1].spec.bytes_per_block_per_layer());
  EXPECT_EQ(describe_page_padding(g), "");
  // 3 heads (768 B a token): 32,768 / (16 x 768) = 2.67, so blocks of 32 tokens (24,576 B) and
  // 8,192 B of padding a page (vLLM refuses this case; we pad and say so).
  for (KVCacheSpec& s : layers)
    if (s.kind == AttentionKind::kSlidingWindow) s.num_kv_heads = 3;
  g = group_layers_uniform_page(layers);
  EXPECT_EQ(g[0].spec.block_size, 32);
  EXPECT_EQ(g[0].page_padding_bytes, 8192u);
  EXPECT_EQ(g[1].page_padding_bytes, 0u);
  EXPECT_EQ(describe_page_padding(g),
            "group 0 (sliding_window, 32 tokens a block): page padded by 8192 of 32768 bytes (25.00%) to match the "
            "other groups");
  // The manager takes them as they are: one pool, two block sizes.
  const std::vector<KVCacheGroupSpec> cache = to_cache_groups(g);
  ASSERT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache[0].spec.block_size, 32);
  EXPECT_EQ(cache[0].num_layers, 4);
  KVCacheConfig config{.num_blocks = 8, .groups = cache};
  EXPECT_NO_THROW(config.validate());
  EXPECT_EQ(config.block_size(), 16);
  EXPECT_EQ(config.max_block_size(), 32);
  // A block size that is not a multiple of the smallest cannot share the hashes.
  config.groups[0].spec.block_size = 24;
  EXPECT_THROW(config.validate(), ConfigError);
}

TEST(MemoryHybrid, GoldenBytesPerRequest) {
  struct Golden {
    const char* model;
    int64_t context, chunk;
    std::vector<int64_t> blocks;
    size_t bytes_per_block;
    uint64_t hybrid, uniform;
  };
  const std::vector<Golden> goldens = {
      // 23 + 23 layers, 8,192 B per token and layer; window 4096: 4095 + 1 tokens + 1 block.
      {"gemma-2-27b", 8192, 1, {257, 512}, 3014656, 2318270464, 3087007744},
      // About 2.9 GiB instead of 15.9 GiB: 2.98 GiB padded (2.91 GiB without the
      // 8 padding layers) against 15.5 GiB (62 layers x 8,192 B x 32,768 tokens).
      {"gemma-3-27b", 32768, 1, {65, 65, 65, 65, 65, 65, 2048}, 1310720, 3195535360, 16642998272},
      {"gemma-3-27b", 32768, 2048, {193, 193, 193, 193, 193, 193, 2048}, 1310720, 4202168320, 16642998272},
      {"gpt-oss-20b", 131072, 1, {9, 8192}, 393216, 3224764416, 6442450944},
      {"gpt-oss-120b", 131072, 1, {9, 8192}, 589824, 4837146624, 9663676416},
      {"gpt-oss-120b", 100, 1, {7, 7}, 589824, 8257536, 8257536},  // shorter than the window: no saving
  };
  for (const Golden& g : goldens) {
    SCOPED_TRACE(::testing::Message() << g.model << " at " << g.context << ", chunk " << g.chunk);
    const HybridKVPlan p = plan_hybrid_kv(preset(g.model), 16, DType::kBF16, g.context, g.chunk);
    EXPECT_EQ(p.group_blocks_per_request, g.blocks);
    EXPECT_EQ(p.bytes_per_block, g.bytes_per_block);
    EXPECT_EQ(p.kv_bytes_per_request, g.hybrid);
    EXPECT_EQ(p.kv_bytes_per_request_uniform, g.uniform);
  }
  const HybridKVPlan g2 = plan_hybrid_kv(preset("gemma-2-27b"), 16, DType::kBF16, 8192);
  EXPECT_EQ(g2.group_bytes_per_token, (std::vector<uint64_t>{188416, 188416})) << "23 layers x 8,192 B";
}

TEST(MemoryHybrid, SlidingFootprintWithChunks) {
  const KVCacheSpec s = layer(AttentionKind::kSlidingWindow, 128);
  EXPECT_EQ(blocks_per_request(s, 100000, 1), 9);  // cdiv(128, 16) + 1
  EXPECT_EQ(blocks_per_request(s, 100000, 512), 41);  // cdiv(639, 16) + 1
  EXPECT_EQ(blocks_per_request(s, 300, 512), 19);  // all 19 blocks of 300 tokens
  EXPECT_EQ(blocks_per_request(layer(AttentionKind::kFull), 300, 512), 19);
  EXPECT_THROW(blocks_per_request(s, 300, 0), ConfigError);
  EXPECT_THROW(plan_hybrid_kv(preset("gpt-oss-20b"), 16, DType::kBF16, 0), ConfigError);
}

}  // namespace
}  // namespace pagedkv
