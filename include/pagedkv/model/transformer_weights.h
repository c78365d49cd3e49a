// Read-only views of a decoder's weights in their stored element types: the model runner's input.
// A llama2.c model's fp32 weights (ModelWeights) become F32 views of the same memory; a GGUF
// model's views point into its memory-mapped file, in any type is_runnable_weight_type accepts.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "pagedkv/model/model_config.h"
#include "pagedkv/model/format/tensor_type.h"

namespace pagedkv {

struct ModelWeights;

// A matrix [rows][cols] (GGUF ne = {cols, rows}), row-major with rows of tensor_row_bytes(type,
// cols) bytes; or a vector (rows == 1). Absent when data is null.
struct WeightTensor {
  TensorType type = TensorType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  bool present() const { return data != nullptr; }
  const float* f32() const { return static_cast<const float*>(data); }  // vectors are always F32
  const void* row(int64_t r) const {
    return static_cast<const char*>(data) + static_cast<size_t>(r) * tensor_row_bytes(type, cols);
  }
  // The matrix of rows first .. first + count - 1 (a part of a fused or stacked tensor).
  WeightTensor row_range(int64_t first, int64_t count) const { return {type, row(first), count, cols}; }
};

struct LayerWeights {
  WeightTensor attn_norm;  // [dim]
  WeightTensor wq, wk, wv;  // [q_dim][dim], [kv_dim][dim], [kv_dim][dim]
  WeightTensor bq, bk, bv;  // biases (qwen2), or absent
  WeightTensor wo;  // [dim][q_dim]
  WeightTensor post_attn_norm;  // gemma2, or absent
  WeightTensor ffn_norm;  // [dim]
  WeightTensor gate, up;  // [hidden][dim]
  WeightTensor down;  // [dim][hidden]
  WeightTensor post_ffn_norm;  // gemma2, or absent
  WeightTensor q_norm, k_norm;  // gemma3, qwen3: [head_dim] per-head RMSNorm gains, or absent
  // Mixture of experts (ModelConfig::n_experts > 0; gate, up and down are then absent): the router
  // [n_experts][dim] (F32), and every expert's matrices stacked: expert e's gate and up are rows
  // e*H .. e*H + H - 1 of [n_experts * H][dim], its down rows e*dim .. of [n_experts * dim][H]
  // (H = expert_hidden_dim; GGUF's 3-D [cols, rows, n_experts] tensors, expert index last).
  WeightTensor router;
  WeightTensor gate_exps, up_exps, down_exps;
};

struct TransformerWeights {
  WeightTensor token_embedding;  // [vocab][dim]
  std::vector<LayerWeights> layers;
  WeightTensor output_norm;  // [dim]
  WeightTensor output;  // [vocab][dim] (the embedding when tied)
  WeightTensor rope_freqs;  // Llama 3: [rotary_dims / 2] divisors of the RoPE frequencies, or absent

  // Calls f(tensor) for every tensor, absent ones included, in a fixed order (for digests).
  template <typename F>
  void for_each_tensor(F&& f) const {
    f(token_embedding);
    for (const LayerWeights& l : layers)
      for (const WeightTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.wo, &l.post_attn_norm,
                                    &l.ffn_norm, &l.gate, &l.up, &l.down, &l.post_ffn_norm})
        f(*t);
    // Tensors added after the digests above were first taken: only when present, so that the
    // digests of models without them stay what they were.
    for (const LayerWeights& l : layers)
      for (const WeightTensor* t : {&l.q_norm, &l.k_norm, &l.router, &l.gate_exps, &l.up_exps, &l.down_exps})
        if (t->present()) f(*t);
    f(output_norm);
    f(output);
    f(rope_freqs);
  }
};

// F32 views of a llama2.c model's weights.
TransformerWeights llama2c_transformer_weights(const ModelConfig& config, const ModelWeights& weights);

}  // namespace pagedkv
