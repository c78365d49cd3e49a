#include "pagedkv/model/model_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

int64_t ModelConfig::num_parameters() const {
  const int64_t d = dim, h = hidden_dim, l = n_layers, v = vocab_size, kv = kv_dim(), q = q_dim();
  const int64_t per_layer = (post_norms ? 4 : 2) * d  // RMSNorm gains
                            + q * d * 2  // wq, wo
                            + kv * d * 2  // wk, wv
                            + (qkv_bias ? q + 2 * kv : 0) +
                            (n_experts > 0 ? n_experts * (expert_hidden_dim * d * 3 + d)  // experts, router
                                           : h * d * 3)  // w1, w2, w3
                            + (qk_norm ? 2 * static_cast<int64_t>(head_dim()) : 0);
  return v * d + l * per_layer + d + (shared_classifier ? 0 : v * d);
}

bool ModelConfig::is_sliding_layer(int layer) const {
  if (sliding_window <= 0) return false;
  if (sliding_window_period <= 0) return true;
  return layer % sliding_window_period < sliding_window_period - 1;
}

namespace {

// How a model's layers fall into KV-cache groups: `layers_per_group` each, the full-attention
// groups first, then the sliding ones.
struct LayerGrouping {
  int layers_per_group = 0;
  int full_groups = 0;
  int sliding_groups = 0;
  int groups() const { return full_groups + sliding_groups; }
};

LayerGrouping layer_grouping(const ModelConfig& c) {
  int sliding = 0;
  for (int l = 0; l < c.n_layers; ++l) sliding += c.is_sliding_layer(l) ? 1 : 0;
  const int full = c.n_layers - sliding;
  if (c.uniform_kv_allocation || sliding == 0) return {c.n_layers, 1, 0};
  if (full == 0) return {c.n_layers, 0, 1};
  int per_group = uniform_group_layers(std::min(full, sliding), std::max(full, sliding));
  // Past the manager's group limit, fuller groups (more padding) rather than more of them.
  while (ceil_div(full, per_group) + ceil_div(sliding, per_group) > kMaxKVCacheGroups) ++per_group;
  return {per_group, ceil_div(full, per_group), ceil_div(sliding, per_group)};
}

// Layer `layer`'s index among the layers of its group's kind (every layer, with one group).
int index_in_kind(const ModelConfig& c, const LayerGrouping& g, int layer) {
  if (g.groups() == 1) return layer;
  int index = 0;
  for (int l = 0; l < layer; ++l) index += c.is_sliding_layer(l) == c.is_sliding_layer(layer) ? 1 : 0;
  return index;
}

int group_of(const ModelConfig& c, const LayerGrouping& g, int layer) {
  if (g.groups() == 1) return 0;
  return (c.is_sliding_layer(layer) ? g.full_groups : 0) + index_in_kind(c, g, layer) / g.layers_per_group;
}

}  // namespace

int ModelConfig::num_kv_cache_groups() const { return layer_grouping(*this).groups(); }

int ModelConfig::kv_cache_group(int layer) const { return group_of(*this, layer_grouping(*this), layer); }

int ModelConfig::arena_layer(int layer) const {
  const LayerGrouping g = layer_grouping(*this);
  return index_in_kind(*this, g, layer) % g.layers_per_group;
}

int ModelConfig::kv_arena_layers() const { return layer_grouping(*this).layers_per_group; }

std::vector<KVCacheGroupSpec> ModelConfig::kv_cache_groups(int block_size, DType dtype) const {
  const LayerGrouping grouping = layer_grouping(*this);
  std::vector<KVCacheGroupSpec> groups(static_cast<size_t>(grouping.groups()));
  for (int g = 0; g < grouping.groups(); ++g) {
    KVCacheSpec& spec = groups[static_cast<size_t>(g)].spec;
    const bool sliding = g >= grouping.full_groups;
    spec.kind = sliding ? AttentionKind::kSlidingWindow : AttentionKind::kFull;
    spec.sliding_window = sliding ? sliding_window : 0;
    spec.block_size = block_size;
    spec.num_kv_heads = n_kv_heads;
    spec.head_dim = head_dim();
    spec.dtype = dtype;
    groups[static_cast<size_t>(g)].num_layers = 0;
  }
  for (int l = 0; l < n_layers; ++l) ++groups[static_cast<size_t>(group_of(*this, grouping, l))].num_layers;
  return groups;
}

KVCacheSpec ModelConfig::kv_cache_spec(int block_size, DType dtype) const {
  return kv_cache_groups(block_size, dtype).front().spec;
}

void ModelConfig::validate() const {
  const std::pair<const char*, int> fields[] = {
      {"dim", dim},         {"hidden_dim", hidden_dim}, {"n_layers", n_layers},
      {"n_heads", n_heads}, {"n_kv_heads", n_kv_heads}, {"vocab_size", vocab_size},
      {"seq_len", seq_len}};
  for (const auto& [name, value] : fields)
    if (value <= 0) throw ConfigError(fmt::format("model config: {} must be positive, got {}", name, value));
  if (explicit_head_dim < 0)
    throw ConfigError(fmt::format("model config: head_dim must be positive, got {}", explicit_head_dim));
  if (explicit_head_dim == 0 && dim % n_heads != 0)
    throw ConfigError(fmt::format("model config: dim ({}) is not divisible by n_heads ({})", dim, n_heads));
  if (n_heads % n_kv_heads != 0)
    throw ConfigError(
        fmt::format("model config: n_heads ({}) is not divisible by n_kv_heads ({})", n_heads, n_kv_heads));
  if (head_dim() % 2 != 0)
    throw ConfigError(
        fmt::format("model config: head_dim = dim / n_heads = {} must be even (RoPE rotates pairs)", head_dim()));
  if (rope_dims < 0 || rope_dims > head_dim() || rope_dims % 2 != 0)
    throw ConfigError(
        fmt::format("model config: rope dims {} must be even and at most head_dim {}", rope_dims, head_dim()));
  if (!(rms_norm_eps > 0.0f) || !std::isfinite(rms_norm_eps))
    throw ConfigError(fmt::format("model config: rms_norm_eps must be positive, got {}", rms_norm_eps));
  if (!(rope_theta_sliding >= 0.0f) || !std::isfinite(rope_theta_sliding) || !(rope_scale_full > 0.0f) ||
      !std::isfinite(rope_scale_full))
    throw ConfigError(fmt::format("model config: rope_theta_sliding {} must be >= 0 and rope_scale_full {} positive",
                                  rope_theta_sliding, rope_scale_full));
  if (rope_original_context < 0 || !(rope_attn_factor > 0.0f) || !std::isfinite(rope_attn_factor))
    throw ConfigError(
        fmt::format("model config: rope_original_context {} must be >= 0 and rope_attn_factor {} positive",
                    rope_original_context, rope_attn_factor));
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta))
    throw ConfigError(fmt::format("model config: rope_theta must be positive, got {}", rope_theta));
  if (!(attn_logit_softcap >= 0.0f) || !(final_logit_softcap >= 0.0f) || !(embedding_scale >= 0.0f))
    throw ConfigError("model config: soft-caps and the embedding scale must be non-negative");
  if (sliding_window < 0 || sliding_window_period < 0)
    throw ConfigError(fmt::format("model config: sliding window {} (period {}) must be non-negative", sliding_window,
                                  sliding_window_period));
}

std::string ModelConfig::describe() const {
  std::string s = fmt::format("dim={} hidden_dim={} n_layers={} n_heads={} n_kv_heads={} vocab_size={} seq_len={} ({})",
                              dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len,
                              shared_classifier ? "shared classifier" : "separate classifier");
  if (architecture != "llama" || explicit_head_dim > 0 || sliding_window > 0)
    s += fmt::format(" {} head_dim={}{}", architecture, head_dim(),
                     sliding_window > 0 ? fmt::format(" sliding_window={}", sliding_window) : std::string());
  if (rope_original_context > 0)
    s += fmt::format(" longrope={} original_context={} attn_factor={}", uses_long_rope_factors() ? "long" : "short",
                     rope_original_context, rope_attn_factor);
  return s;
}

}  // namespace pagedkv
