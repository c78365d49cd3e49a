// Models that mix sliding-window and full-attention layers (Gemma 2 and 3, gpt-oss): their
// layers grouped into KV-cache groups the way vLLM's hybrid allocator groups them, and what one
// request costs in KV bytes with those groups versus allocating every layer for every token.
//
// vLLM's grouping rule (kv_cache_utils.py, uniform page size): layers are split by spec; with
// m the fewest and M the most layers of one spec, groups hold g = M layers when M < 1.25 m and
// g = m otherwise; each spec's layers fill ceil(n / g) groups, the last one padded to g layers.
// Every group then has the same page (g layers' worth of one block), so one pool serves them;
// padding layers are bytes a block carries for no layer.
//
// Layers whose KV bytes per token differ (other head counts, head sizes or dtypes) first get
// block sizes scaled so their pages match (vLLM's unify_kv_cache_spec_page_size): the largest
// page P = block_size x the most bytes per token; a layer of b bytes per token gets
// floor(P / (block_size x b)) x block_size tokens a block. Where P is not a multiple of its page
// (vLLM refuses that case), the block pads the rest: page padding, reported as waste.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/core/dtype.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

struct HybridModelShape {
  std::string name;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int sliding_window = 0;  // tokens
  // Layer l is a full-attention layer when l % period == period - 1, else it slides
  // (Gemma 2 and gpt-oss: 2; Gemma 3: 6).
  int full_attention_period = 2;
  int max_position_embeddings = 0;
  DType dtype = DType::kBF16;

  bool is_sliding_layer(int layer) const { return layer % full_attention_period != full_attention_period - 1; }
  // One spec per layer, at this block size and KV dtype.
  std::vector<KVCacheSpec> layer_specs(int block_size, DType kv_dtype) const;
};

// gemma-2-27b, gemma-3-27b, gpt-oss-20b, gpt-oss-120b (docs/hybrid.md gives the sources).
std::span<const HybridModelShape> hybrid_model_presets();
// The preset of that name (case-insensitive), or null.
const HybridModelShape* find_hybrid_model_preset(std::string_view name);

// A KV-cache group of the uniform-page layout: `num_layers` real layers of `spec` (its block
// size scaled to the common page), padded to `padded_layers` (the common group size).
struct PlannedKVGroup {
  KVCacheSpec spec;
  int num_layers = 0;
  int padded_layers = 0;
  size_t page_padding_bytes = 0;  // per layer and block: the common page minus this spec's page
};

// Per-layer specs with block sizes scaled so every layer's page (bytes_per_block_per_layer) is
// as close to the largest as a multiple of the block size allows (see the header comment).
// ConfigError on no layers or layers of different block sizes before scaling.
std::vector<KVCacheSpec> unify_page_size(std::span<const KVCacheSpec> layers);
// The common page of unified specs: the largest bytes_per_block_per_layer.
size_t common_page_bytes(std::span<const KVCacheSpec> layers);

// vLLM's grouping rule over per-layer specs (see the header comment): pages unified, then
// groups of one spec in layer order, specs in order of first appearance. ConfigError on no
// layers or layers of different block sizes.
std::vector<PlannedKVGroup> group_layers_uniform_page(std::span<const KVCacheSpec> layers);

// The groups as the manager takes them (KVCacheConfig::groups): each with its scaled block
// size and its real layer count.
std::vector<KVCacheGroupSpec> to_cache_groups(std::span<const PlannedKVGroup> groups);

// The start-up line about page padding (vLLM logs one when it pads pages): empty when every
// group's page is exactly the common page.
std::string describe_page_padding(std::span<const PlannedKVGroup> groups);

struct HybridKVPlan {
  std::vector<PlannedKVGroup> groups;
  int padding_layers = 0;
  double padding_waste = 0;  // padding layers / real layers of their spec, the worst spec
  double page_padding_waste = 0;  // page padding / the common page, the worst group
  size_t bytes_per_block = 0;  // one page of the pool: padded_layers layers' blocks
  int64_t context_len = 0;
  int64_t chunk_tokens = 1;  // the prefill chunk of the sliding footprint
  std::vector<uint64_t> group_bytes_per_token;  // real layers of each group
  std::vector<int64_t> group_blocks_per_request;  // blocks each group holds at its largest
  uint64_t kv_bytes_per_request = 0;  // hybrid groups, pages as allocated (padding included)
  uint64_t kv_bytes_per_request_uniform = 0;  // every layer keeps every token
};

// Plans `model` at this block size, KV dtype, context length and prefill chunk (a sliding group
// holds cdiv(min(window - 1 + chunk, context), block) + 1 blocks). ConfigError on bad input.
HybridKVPlan plan_hybrid_kv(const HybridModelShape& model, int block_size, DType kv_dtype, int64_t context_len,
                            int64_t chunk_tokens = 1);

}  // namespace pagedkv
