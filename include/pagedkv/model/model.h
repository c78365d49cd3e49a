// A loaded model: its configuration and read-only views of its fp32 weights, plus whatever keeps
// those weights alive (a memory-mapped checkpoint, or a buffer of generated weights).
//
// Weight layout is llama2.c's: every matrix row-major [out][in], so y[i] = sum_j W[i*in + j] x[j];
// per-layer tensors are stacked along the outermost axis ([layer][out][in]).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "pagedkv/model/model_config.h"
#include "pagedkv/model/transformer_weights.h"

namespace pagedkv {

// Non-owning pointers into one model's weights. Valid while the owning Model lives.
struct ModelWeights {
  const float* token_embedding = nullptr;  // [vocab_size][dim]
  const float* rms_att = nullptr;  // [n_layers][dim]        attention RMSNorm gains
  const float* wq = nullptr;  // [n_layers][dim][dim]
  const float* wk = nullptr;  // [n_layers][kv_dim][dim]
  const float* wv = nullptr;  // [n_layers][kv_dim][dim]
  const float* wo = nullptr;  // [n_layers][dim][dim]
  const float* rms_ffn = nullptr;  // [n_layers][dim]        feed-forward RMSNorm gains
  const float* w1 = nullptr;  // [n_layers][hidden_dim][dim]   gate
  const float* w2 = nullptr;  // [n_layers][dim][hidden_dim]   down
  const float* w3 = nullptr;  // [n_layers][hidden_dim][dim]   up
  const float* rms_final = nullptr;  // [dim]
  const float* wcls = nullptr;  // [vocab_size][dim]; == token_embedding when shared
};

// The tensors of a llama2.c checkpoint body, in file order: calls f(field, factors) once per tensor,
// which holds the product of `factors` floats; `field` is its ModelWeights member, or nullptr for
// the two legacy RoPE tables (present in the file, never read: RoPE is computed). wcls comes last,
// and only when the classifier is not shared. The one statement of the format that loading,
// writing and fingerprinting a checkpoint all walk.
using WeightField = const float* ModelWeights::*;
template <typename F>
void for_each_llama2c_tensor(const ModelConfig& c, F&& f) {
  const uint64_t d = static_cast<uint64_t>(c.dim), h = static_cast<uint64_t>(c.hidden_dim),
                 l = static_cast<uint64_t>(c.n_layers), v = static_cast<uint64_t>(c.vocab_size),
                 kv = static_cast<uint64_t>(c.kv_dim()), s = static_cast<uint64_t>(c.seq_len),
                 hd = static_cast<uint64_t>(c.head_dim());
  using Factors = std::initializer_list<uint64_t>;
  f(&ModelWeights::token_embedding, Factors{v, d});
  f(&ModelWeights::rms_att, Factors{l, d});
  f(&ModelWeights::wq, Factors{l, d, d});
  f(&ModelWeights::wk, Factors{l, kv, d});
  f(&ModelWeights::wv, Factors{l, kv, d});
  f(&ModelWeights::wo, Factors{l, d, d});
  f(&ModelWeights::rms_ffn, Factors{l, d});
  f(&ModelWeights::w1, Factors{l, h, d});
  f(&ModelWeights::w2, Factors{l, d, h});
  f(&ModelWeights::w3, Factors{l, h, d});
  f(&ModelWeights::rms_final, Factors{d});
  f(WeightField{nullptr}, Factors{s, hd / 2});  // legacy freq_cis_real
  f(WeightField{nullptr}, Factors{s, hd / 2});  // legacy freq_cis_imag
  if (!c.shared_classifier) f(&ModelWeights::wcls, Factors{v, d});
}

// The product of a tensor's factors (for a validated config, where it cannot overflow).
inline size_t tensor_floats(std::initializer_list<uint64_t> factors) {
  uint64_t n = 1;
  for (uint64_t f : factors) n *= f;
  return static_cast<size_t>(n);
}

// The number of floats a llama2.c checkpoint body holds for `config` (everything after the
// 28-byte header: weights, the two legacy RoPE tables, and wcls when it is not shared).
size_t llama2c_body_floats(const ModelConfig& config);

// Points a ModelWeights at a llama2.c-ordered body that starts at `body` (llama2c_body_floats floats).
ModelWeights llama2c_weight_views(const ModelConfig& config, const float* body);

// Base of every model the runner can execute. Not copyable: the views point into owned memory.
class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  // The fp32 llama2.c weights; all null for a model in another format (see tensors()).
  const ModelWeights& weights() const { return weights_; }
  // Every weight in its stored type: what the runner executes. For a llama2.c model, F32 views of
  // weights().
  TransformerWeights tensors() const {
    return tensors_.layers.empty() ? llama2c_transformer_weights(config_, weights_) : tensors_;
  }
  // Where the weights came from, for start-up banners: a file path or "built-in random model (seed 7)".
  const std::string& source() const { return source_; }

 protected:
  Model() = default;
  ModelConfig config_;
  ModelWeights weights_;
  TransformerWeights tensors_;  // set by models that are not llama2.c's
  std::string source_;
};

}  // namespace pagedkv
