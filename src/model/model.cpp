#include "pagedkv/model/model.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "model_internal.h"

namespace pagedkv {

namespace detail {

std::optional<uint64_t> checked_llama2c_body_floats(const ModelConfig& c) {
  // Sum of products of positive int32 fields; any of them can overflow 64 bits for a hostile
  // header, so every step is checked.
  uint64_t total = 0;
  bool overflow = false;
  for_each_llama2c_tensor(c, [&](WeightField, std::initializer_list<uint64_t> factors) {
    uint64_t p = 1;
    for (uint64_t f : factors) overflow |= __builtin_mul_overflow(p, f, &p);
    overflow |= __builtin_add_overflow(total, p, &total);
  });
  if (overflow) return std::nullopt;
  return total;
}

}  // namespace detail

size_t llama2c_body_floats(const ModelConfig& config) {
  config.validate();
  auto floats = detail::checked_llama2c_body_floats(config);
  if (!floats || *floats > SIZE_MAX / sizeof(float))
    throw ConfigError(fmt::format("model config {} is too large to address", config.describe()));
  return static_cast<size_t>(*floats);
}

TransformerWeights llama2c_transformer_weights(const ModelConfig& c, const ModelWeights& w) {
  const int64_t d = c.dim, h = c.hidden_dim, kv = c.kv_dim();
  auto matrix = [](const float* p, int64_t rows, int64_t cols) {
    return WeightTensor{TensorType::kF32, p, rows, cols};
  };
  auto vec = [&](const float* p) { return matrix(p, 1, d); };
  TransformerWeights t;
  t.token_embedding = matrix(w.token_embedding, c.vocab_size, d);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = vec(w.rms_att + l * d);
    lw.wq = matrix(w.wq + l * d * d, d, d);
    lw.wk = matrix(w.wk + l * kv * d, kv, d);
    lw.wv = matrix(w.wv + l * kv * d, kv, d);
    lw.wo = matrix(w.wo + l * d * d, d, d);
    lw.ffn_norm = vec(w.rms_ffn + l * d);
    lw.gate = matrix(w.w1 + l * h * d, h, d);
    lw.down = matrix(w.w2 + l * d * h, d, h);
    lw.up = matrix(w.w3 + l * h * d, h, d);
    t.layers.push_back(lw);
  }
  t.output_norm = vec(w.rms_final);
  t.output = matrix(w.wcls, c.vocab_size, d);
  return t;
}

ModelWeights llama2c_weight_views(const ModelConfig& c, const float* body) {
  ModelWeights w;
  const float* p = body;
  for_each_llama2c_tensor(c, [&](WeightField field, std::initializer_list<uint64_t> factors) {
    if (field != nullptr) w.*field = p;
    p += tensor_floats(factors);
  });
  if (c.shared_classifier) w.wcls = w.token_embedding;
  return w;
}

}  // namespace pagedkv
