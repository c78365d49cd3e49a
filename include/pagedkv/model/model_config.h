// The shape of a LLaMA-architecture decoder (llama2.c's Config): widths, head counts, vocabulary
// and maximum context. Everything else the model runner, the KV cache and the engine need about
// the model's shape is derived from it here, in one place.
#pragma once

#include <cstdint>
#include <string>

#include "pagedkv/core/dtype.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

struct ModelConfig {
  int dim = 0;         // width of the residual stream (= n_heads * head_dim)
  int hidden_dim = 0;  // inner width of the SwiGLU feed-forward block
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads; query head h reads KV head h / (n_heads / n_kv_heads)
  int vocab_size = 0;  // always positive here (llama2.c's sign convention is shared_classifier)
  int seq_len = 0;     // maximum context: positions 0 .. seq_len - 1
  // True when the logits reuse the token embedding (llama2.c: header vocab_size > 0);
  // false when the checkpoint carries its own classifier matrix after the other weights.
  bool shared_classifier = true;

  // Fixed by the llama2.c architecture.
  static constexpr float kRmsNormEps = 1e-5f;
  static constexpr float kRopeTheta = 10000.0f;

  int head_dim() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_dim(); }  // K (or V) floats per token per layer
  int queries_per_kv_head() const { return n_heads / n_kv_heads; }

  // Trained parameters (the llama2.c file also holds 2 * seq_len * head_dim / 2 unused RoPE floats).
  int64_t num_parameters() const;

  // What the KV cache stores per token and layer for this model, for an arena of any block size
  // and element type (f32 reproduces llama2.c exactly; f16/bf16 halve the memory).
  KVCacheSpec kv_cache_spec(int block_size, DType dtype = DType::kF32) const;

  // Throws ConfigError naming the first bad field: every field positive, dim divisible by
  // n_heads, n_heads divisible by n_kv_heads, head_dim even (RoPE rotates pairs).
  void validate() const;

  // "dim=64 hidden_dim=172 n_layers=5 n_heads=8 n_kv_heads=4 vocab_size=512 seq_len=512 (shared classifier)"
  std::string describe() const;

  bool operator==(const ModelConfig&) const = default;
};

}  // namespace pagedkv
