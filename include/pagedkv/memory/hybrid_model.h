// Models that mix sliding-window and full-attention layers (Gemma 2 and 3, gpt-oss): their
// layers grouped into KV-cache groups the way vLLM's hybrid allocator groups them, and what one
// request costs in KV bytes with those groups versus allocating every layer for every token.
//
// vLLM's grouping rule (kv_cache_utils.py, uniform page size): layers are split by spec; with
// m the fewest and M the most layers of one spec, groups hold g = M layers when M < 1.25 m and
// g = m otherwise; each spec's layers fill ceil(n / g) groups, the last one padded to g layers.
// Every group then has the same page (g layers' worth of one block), so one pool serves them;
// padding layers are bytes a block carries for no layer.
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
  int sliding_window = 0;   // tokens
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

// A KV-cache group of the uniform-page layout: `num_layers` real layers of `spec`, padded to
// `padded_layers` (the common group size).
struct PlannedKVGroup {
  KVCacheSpec spec;
  int num_layers = 0;
  int padded_layers = 0;
};

// vLLM's grouping rule over per-layer specs (see the header comment), groups of one spec in
// layer order, specs in order of first appearance. ConfigError on no layers or mixed block sizes.
std::vector<PlannedKVGroup> group_layers_uniform_page(std::span<const KVCacheSpec> layers);

struct HybridKVPlan {
  std::vector<PlannedKVGroup> groups;
  int padding_layers = 0;
  double padding_waste = 0;              // padding layers / real layers of their spec, the worst spec
  size_t bytes_per_block = 0;            // one page of the pool: padded_layers layers' blocks
  int64_t context_len = 0;
  int64_t chunk_tokens = 1;              // the prefill chunk of the sliding footprint
  std::vector<uint64_t> group_bytes_per_token;    // real layers of each group
  std::vector<int64_t> group_blocks_per_request;  // blocks each group holds at its largest
  uint64_t kv_bytes_per_request = 0;              // hybrid groups, pages as allocated (padding included)
  uint64_t kv_bytes_per_request_uniform = 0;      // every layer keeps every token
};

// Plans `model` at this block size, KV dtype, context length and prefill chunk (a sliding group
// holds cdiv(min(window - 1 + chunk, context), block) + 1 blocks). ConfigError on bad input.
HybridKVPlan plan_hybrid_kv(const HybridModelShape& model, int block_size, DType kv_dtype, int64_t context_len,
                            int64_t chunk_tokens = 1);

}  // namespace pagedkv
