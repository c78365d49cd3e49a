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
  auto add_product = [&](std::initializer_list<uint64_t> factors) {
    uint64_t p = 1;
    for (uint64_t f : factors) overflow |= __builtin_mul_overflow(p, f, &p);
    overflow |= __builtin_add_overflow(total, p, &total);
  };
  const uint64_t d = static_cast<uint64_t>(c.dim), h = static_cast<uint64_t>(c.hidden_dim),
                 l = static_cast<uint64_t>(c.n_layers), v = static_cast<uint64_t>(c.vocab_size),
                 kv = static_cast<uint64_t>(c.kv_dim()), s = static_cast<uint64_t>(c.seq_len),
                 hd = static_cast<uint64_t>(c.head_dim());
  add_product({v, d});         // token_embedding
  add_product({l, d});         // rms_att
  add_product({l, d, d});      // wq
  add_product({l, kv, d});     // wk
  add_product({l, kv, d});     // wv
  add_product({l, d, d});      // wo
  add_product({l, d});         // rms_ffn
  add_product({l, h, d});      // w1
  add_product({l, d, h});      // w2
  add_product({l, h, d});      // w3
  add_product({d});            // rms_final
  add_product({s, hd / 2});    // legacy freq_cis_real
  add_product({s, hd / 2});    // legacy freq_cis_imag
  if (!c.shared_classifier) add_product({v, d});  // wcls
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

ModelWeights llama2c_weight_views(const ModelConfig& c, const float* body) {
  const size_t d = static_cast<size_t>(c.dim), h = static_cast<size_t>(c.hidden_dim),
               l = static_cast<size_t>(c.n_layers), v = static_cast<size_t>(c.vocab_size),
               kv = static_cast<size_t>(c.kv_dim()), s = static_cast<size_t>(c.seq_len),
               hd = static_cast<size_t>(c.head_dim());
  ModelWeights w;
  const float* p = body;
  auto take = [&p](size_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  w.token_embedding = take(v * d);
  w.rms_att = take(l * d);
  w.wq = take(l * d * d);
  w.wk = take(l * kv * d);
  w.wv = take(l * kv * d);
  w.wo = take(l * d * d);
  w.rms_ffn = take(l * d);
  w.w1 = take(l * h * d);
  w.w2 = take(l * d * h);
  w.w3 = take(l * h * d);
  w.rms_final = take(d);
  take(s * (hd / 2));  // legacy RoPE tables: RoPE is computed, not read
  take(s * (hd / 2));
  w.wcls = c.shared_classifier ? w.token_embedding : take(v * d);
  return w;
}

}  // namespace pagedkv
