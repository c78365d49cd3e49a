// A loaded model: its configuration and read-only views of its fp32 weights, plus whatever keeps
// those weights alive (a memory-mapped checkpoint, or a buffer of generated weights).
//
// Weight layout is llama2.c's: every matrix row-major [out][in], so y[i] = sum_j W[i*in + j] x[j];
// per-layer tensors are stacked along the outermost axis ([layer][out][in]).
#pragma once

#include <span>
#include <string>

#include "pagedkv/model/model_config.h"

namespace pagedkv {

// Non-owning pointers into one model's weights. Valid while the owning Model lives.
struct ModelWeights {
  const float* token_embedding = nullptr;  // [vocab_size][dim]
  const float* rms_att = nullptr;          // [n_layers][dim]        attention RMSNorm gains
  const float* wq = nullptr;               // [n_layers][dim][dim]
  const float* wk = nullptr;               // [n_layers][kv_dim][dim]
  const float* wv = nullptr;               // [n_layers][kv_dim][dim]
  const float* wo = nullptr;               // [n_layers][dim][dim]
  const float* rms_ffn = nullptr;          // [n_layers][dim]        feed-forward RMSNorm gains
  const float* w1 = nullptr;               // [n_layers][hidden_dim][dim]   gate
  const float* w2 = nullptr;               // [n_layers][dim][hidden_dim]   down
  const float* w3 = nullptr;               // [n_layers][hidden_dim][dim]   up
  const float* rms_final = nullptr;        // [dim]
  const float* wcls = nullptr;             // [vocab_size][dim]; == token_embedding when shared
};

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
  const ModelWeights& weights() const { return weights_; }
  // Where the weights came from, for start-up banners: a file path or "built-in random model (seed 7)".
  const std::string& source() const { return source_; }

 protected:
  Model() = default;
  ModelConfig config_;
  ModelWeights weights_;
  std::string source_;
};

}  // namespace pagedkv
