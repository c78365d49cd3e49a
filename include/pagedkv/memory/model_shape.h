// The architecture numbers of a decoder-only transformer that decide its KV-cache and weight
// memory: named presets for well-known models, or read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "pagedkv/core/dtype.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

struct ModelShape {
  std::string name;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;  // < num_q_heads for grouped-query attention
  int head_dim = 0;
  int hidden_size = 0;
  int intermediate_size = 0;  // MLP width (per expert for mixture-of-experts models)
  int num_experts = 1;  // experts per MoE layer; 1 for a dense MLP
  int vocab_size = 0;
  bool tie_word_embeddings = false;  // the LM head reuses the embedding matrix
  bool attention_bias = false;  // q/k/v projections carry biases (Qwen2)
  uint64_t num_params = 0;  // total parameters, for weight memory
  int max_position_embeddings = 0;
  std::optional<int> sliding_window;  // tokens each token attends to, when attention is windowed
  std::optional<DType> dtype;  // the checkpoint's dtype (config.json's torch_dtype)

  // The per-layer KV-cache spec at this block size and KV dtype: full attention, or sliding
  // window when the model has one.
  KVCacheSpec kv_cache_spec(int block_size, DType kv_dtype) const;

  // Throws ConfigError naming the first non-positive or inconsistent field.
  void validate() const;
};

// Parameters of a Llama-style decoder (the shape of Llama, Mistral, Mixtral, Qwen2): token
// embeddings, per layer the q/k/v/o projections (plus q/k/v biases when attention_bias), a
// gated MLP of three matrices per expert (plus a router when num_experts > 1) and two RMSNorm
// weights, the final norm, and an LM head unless tied to the embeddings.
uint64_t estimate_num_params(const ModelShape& shape);

// Built-in presets (llama-2-7b, llama-3-70b, mixtral-8x7b, ...), in a fixed order.
std::span<const ModelShape> model_presets();
// The preset of that name (case-insensitive); ConfigError listing every preset otherwise.
const ModelShape& model_preset(std::string_view name);

// Reads a Hugging Face config.json. `source` names the file in error messages. Required:
// num_hidden_layers, num_attention_heads, hidden_size, vocab_size, intermediate_size,
// max_position_embeddings. Optional: num_key_value_heads (default: num_attention_heads),
// head_dim (default: hidden_size / num_attention_heads), sliding_window (ignored when null, when
// use_sliding_window is false, or when the model interleaves full-attention layers),
// torch_dtype or dtype, tie_word_embeddings, attention_bias (default: true for model_type
// qwen2), num_local_experts (default 1). num_params is estimated with estimate_num_params.
// Throws ConfigError naming the field and the source.
ModelShape parse_hf_config(std::string_view json_text, std::string_view source);
// parse_hf_config on the file's contents; a directory means its config.json.
ModelShape load_hf_config(const std::filesystem::path& path);

}  // namespace pagedkv
