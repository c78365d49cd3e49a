#include "pagedkv/model/model_config.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

int64_t ModelConfig::num_parameters() const {
  const int64_t d = dim, h = hidden_dim, l = n_layers, v = vocab_size, kv = kv_dim();
  const int64_t per_layer = 2 * d            // two RMSNorm gains
                            + d * d * 2      // wq, wo
                            + kv * d * 2     // wk, wv
                            + h * d * 3;     // w1, w2, w3
  return v * d + l * per_layer + d + (shared_classifier ? 0 : v * d);
}

KVCacheSpec ModelConfig::kv_cache_spec(int block_size, DType dtype) const {
  KVCacheSpec spec;
  spec.kind = AttentionKind::kFull;
  spec.block_size = block_size;
  spec.num_kv_heads = n_kv_heads;
  spec.head_dim = head_dim();
  spec.dtype = dtype;
  return spec;
}

void ModelConfig::validate() const {
  const std::pair<const char*, int> fields[] = {
      {"dim", dim},         {"hidden_dim", hidden_dim}, {"n_layers", n_layers}, {"n_heads", n_heads},
      {"n_kv_heads", n_kv_heads}, {"vocab_size", vocab_size}, {"seq_len", seq_len}};
  for (const auto& [name, value] : fields)
    if (value <= 0) throw ConfigError(fmt::format("model config: {} must be positive, got {}", name, value));
  if (dim % n_heads != 0)
    throw ConfigError(fmt::format("model config: dim ({}) is not divisible by n_heads ({})", dim, n_heads));
  if (n_heads % n_kv_heads != 0)
    throw ConfigError(fmt::format("model config: n_heads ({}) is not divisible by n_kv_heads ({})",
                                  n_heads, n_kv_heads));
  if (head_dim() % 2 != 0)
    throw ConfigError(fmt::format("model config: head_dim = dim / n_heads = {} must be even (RoPE rotates pairs)",
                                  head_dim()));
}

std::string ModelConfig::describe() const {
  return fmt::format("dim={} hidden_dim={} n_layers={} n_heads={} n_kv_heads={} vocab_size={} seq_len={} ({})",
                     dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len,
                     shared_classifier ? "shared classifier" : "separate classifier");
}

}  // namespace pagedkv
