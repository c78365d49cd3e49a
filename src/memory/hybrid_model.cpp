#include "pagedkv/memory/hybrid_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "pagedkv/core/error.h"
#include "pagedkv/memory/kv_memory.h"

namespace pagedkv {
namespace {

bool same_spec(const KVCacheSpec& a, const KVCacheSpec& b) {
  return a.kind == b.kind && a.block_size == b.block_size && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.dtype == b.dtype && a.sliding_window == b.sliding_window;
}

// From each model's published config.json (Hugging Face): num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim, sliding_window, the layer pattern
// (Gemma 2: alternating, Gemma 3: sliding_window_pattern 6, gpt-oss: layer_types alternating
// from a sliding layer), max_position_embeddings, bf16.
std::vector<HybridModelShape> make_hybrid_presets() {
  return {
      {.name = "gemma-2-27b",
       .num_layers = 46,
       .num_q_heads = 32,
       .num_kv_heads = 16,
       .head_dim = 128,
       .sliding_window = 4096,
       .full_attention_period = 2,
       .max_position_embeddings = 8192,
       .dtype = DType::kBF16},
      {.name = "gemma-3-27b",
       .num_layers = 62,
       .num_q_heads = 32,
       .num_kv_heads = 16,
       .head_dim = 128,
       .sliding_window = 1024,
       .full_attention_period = 6,
       .max_position_embeddings = 131072,
       .dtype = DType::kBF16},
      {.name = "gpt-oss-20b",
       .num_layers = 24,
       .num_q_heads = 64,
       .num_kv_heads = 8,
       .head_dim = 64,
       .sliding_window = 128,
       .full_attention_period = 2,
       .max_position_embeddings = 131072,
       .dtype = DType::kBF16},
      {.name = "gpt-oss-120b",
       .num_layers = 36,
       .num_q_heads = 64,
       .num_kv_heads = 8,
       .head_dim = 64,
       .sliding_window = 128,
       .full_attention_period = 2,
       .max_position_embeddings = 131072,
       .dtype = DType::kBF16},
  };
}

}  // namespace

std::vector<KVCacheSpec> HybridModelShape::layer_specs(int block_size, DType kv_dtype) const {
  std::vector<KVCacheSpec> out;
  for (int l = 0; l < num_layers; ++l) {
    KVCacheSpec s;
    s.kind = is_sliding_layer(l) ? AttentionKind::kSlidingWindow : AttentionKind::kFull;
    s.block_size = block_size;
    s.num_kv_heads = num_kv_heads;
    s.head_dim = head_dim;
    s.dtype = kv_dtype;
    s.sliding_window = is_sliding_layer(l) ? sliding_window : 0;
    s.validate();
    out.push_back(s);
  }
  return out;
}

std::span<const HybridModelShape> hybrid_model_presets() {
  static const std::vector<HybridModelShape> presets = make_hybrid_presets();
  return presets;
}

const HybridModelShape* find_hybrid_model_preset(std::string_view name) {
  for (const HybridModelShape& m : hybrid_model_presets())
    if (m.name.size() == name.size() && std::equal(name.begin(), name.end(), m.name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return &m;
  return nullptr;
}

std::vector<KVCacheSpec> unify_page_size(std::span<const KVCacheSpec> layers) {
  if (layers.empty()) throw ConfigError("no layers to group");
  for (const KVCacheSpec& s : layers)
    if (s.block_size != layers.front().block_size)
      throw ConfigError(
          fmt::format("layers with block sizes {} and {}: give every layer the same block size; "
                      "the grouping scales them to one page",
                      s.block_size, layers.front().block_size));
  size_t page = 0;
  for (const KVCacheSpec& s : layers) page = std::max(page, s.bytes_per_block_per_layer());
  std::vector<KVCacheSpec> out(layers.begin(), layers.end());
  for (KVCacheSpec& s : out) {
    const size_t ratio = page / s.bytes_per_block_per_layer();  // >= 1: page is the largest
    if (ratio > static_cast<size_t>(1 << 20) / static_cast<size_t>(s.block_size))
      throw ConfigError(
          fmt::format("a layer of {} bytes per token would need blocks of {} x {} tokens to fill a page of {} bytes",
                      s.bytes_per_token_per_layer(), ratio, s.block_size, page));
    s.block_size *= static_cast<int>(ratio);
  }
  return out;
}

size_t common_page_bytes(std::span<const KVCacheSpec> layers) {
  size_t page = 0;
  for (const KVCacheSpec& s : layers) page = std::max(page, s.bytes_per_block_per_layer());
  return page;
}

std::vector<PlannedKVGroup> group_layers_uniform_page(std::span<const KVCacheSpec> layers) {
  const std::vector<KVCacheSpec> unified = unify_page_size(layers);
  const size_t page = common_page_bytes(unified);
  std::vector<std::pair<KVCacheSpec, int>> kinds;  // spec, layers of it
  for (const KVCacheSpec& s : unified) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return same_spec(k.first, s); });
    if (it == kinds.end()) kinds.emplace_back(s, 1);
    else ++it->second;
  }
  int fewest = kinds.front().second, most = kinds.front().second;
  for (const auto& k : kinds) {
    fewest = std::min(fewest, k.second);
    most = std::max(most, k.second);
  }
  // Few padding layers when the counts are close (gpt-oss-20b with a draft layer: 12 and 13).
  const int group_size = uniform_group_layers(fewest, most);
  std::vector<PlannedKVGroup> out;
  for (const auto& [spec, n] : kinds)
    for (int left = n; left > 0; left -= group_size)
      out.push_back(
          PlannedKVGroup{spec, std::min(left, group_size), group_size, page - spec.bytes_per_block_per_layer()});
  return out;
}

std::vector<KVCacheGroupSpec> to_cache_groups(std::span<const PlannedKVGroup> groups) {
  std::vector<KVCacheGroupSpec> out;
  for (const PlannedKVGroup& g : groups) out.push_back(KVCacheGroupSpec{g.spec, g.num_layers});
  return out;
}

std::string describe_page_padding(std::span<const PlannedKVGroup> groups) {
  std::string out;
  for (size_t i = 0; i < groups.size(); ++i) {
    const PlannedKVGroup& g = groups[i];
    if (g.page_padding_bytes == 0) continue;
    const size_t page = g.spec.bytes_per_block_per_layer() + g.page_padding_bytes;
    out += fmt::format(
        "{}group {} ({}, {} tokens a block): page padded by {} of {} bytes ({:.2f}%) to match the other groups",
        out.empty() ? "" : "\n", i, attention_kind_name(g.spec.kind), g.spec.block_size, g.page_padding_bytes, page,
        100.0 * static_cast<double>(g.page_padding_bytes) / static_cast<double>(page));
  }
  return out;
}

HybridKVPlan plan_hybrid_kv(const HybridModelShape& model, int block_size, DType kv_dtype, int64_t context_len,
                            int64_t chunk_tokens) {
  if (context_len <= 0) throw ConfigError(fmt::format("context length must be positive, got {}", context_len));
  if (chunk_tokens <= 0) throw ConfigError(fmt::format("prefill chunk must be positive, got {}", chunk_tokens));
  const std::vector<KVCacheSpec> layers = model.layer_specs(block_size, kv_dtype);
  HybridKVPlan p;
  p.groups = group_layers_uniform_page(layers);
  p.context_len = context_len;
  p.chunk_tokens = chunk_tokens;
  const PlannedKVGroup& first = p.groups.front();
  p.bytes_per_block =
      (first.spec.bytes_per_block_per_layer() + first.page_padding_bytes) * static_cast<size_t>(first.padded_layers);
  // Padding per spec: the last group of each spec.
  for (size_t i = 0; i < p.groups.size(); ++i) {
    const PlannedKVGroup& g = p.groups[i];
    p.group_bytes_per_token.push_back(g.spec.bytes_per_token_per_layer() * static_cast<uint64_t>(g.num_layers));
    const int64_t blocks = blocks_per_request(g.spec, context_len, chunk_tokens);
    p.group_blocks_per_request.push_back(blocks);
    p.kv_bytes_per_request += static_cast<uint64_t>(blocks) * p.bytes_per_block;
    p.page_padding_waste = std::max(p.page_padding_waste,
                                    static_cast<double>(g.page_padding_bytes) /
                                        static_cast<double>(p.bytes_per_block / static_cast<size_t>(g.padded_layers)));
    const int pad = g.padded_layers - g.num_layers;
    if (pad > 0) {
      int real = 0;
      for (const PlannedKVGroup& h : p.groups)
        if (same_spec(h.spec, g.spec)) real += h.num_layers;
      p.padding_layers += pad;
      p.padding_waste = std::max(p.padding_waste, static_cast<double>(pad) / real);
    }
  }
  KVCacheSpec full = layers.front();
  full.kind = AttentionKind::kFull;
  full.sliding_window = 0;
  p.kv_bytes_per_request_uniform = static_cast<uint64_t>(blocks_per_request(full, context_len)) *
                                   full.bytes_per_block_per_layer() * static_cast<uint64_t>(model.num_layers);
  return p;
}

}  // namespace pagedkv
