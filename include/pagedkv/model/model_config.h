// The shape of a LLaMA-family decoder: llama2.c's Config (widths, head counts, vocabulary,
// maximum context) plus the variations of the GGUF architectures (llama, qwen2, qwen3, phi3,
// gemma2, gemma3, qwen3moe): RoPE style and base, biases, extra norms, activation, soft-caps,
// sliding-window layers and mixture-of-experts feed-forward blocks. The
// defaults are llama2.c's, so a config read from a llama2.c header means exactly what it did.
// Everything else the model runner, the KV cache and the engine need about the model's shape is
// derived from it here, in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedkv/core/dtype.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

// How RoPE pairs the dimensions of a head: llama's (x[2i], x[2i+1]) or GPT-NeoX's (x[i], x[i + n/2]).
enum class RopeStyle { kAdjacentPairs, kHalves };
enum class FeedForwardActivation { kSilu, kGeluTanh };  // SwiGLU or GeGLU

struct ModelConfig {
  int dim = 0;  // width of the residual stream (= n_heads * head_dim)
  int hidden_dim = 0;  // inner width of the SwiGLU feed-forward block
  int n_layers = 0;
  int n_heads = 0;  // query heads
  int n_kv_heads = 0;  // key/value heads; query head h reads KV head h / (n_heads / n_kv_heads)
  int vocab_size = 0;  // always positive here (llama2.c's sign convention is shared_classifier)
  int seq_len = 0;  // maximum context: positions 0 .. seq_len - 1
  // True when the logits reuse the token embedding (llama2.c: header vocab_size > 0);
  // false when the checkpoint carries its own classifier matrix after the other weights.
  bool shared_classifier = true;

  // llama2.c's values, the defaults below.
  static constexpr float kRmsNormEps = 1e-5f;
  static constexpr float kRopeTheta = 10000.0f;

  // ---- beyond llama2.c (GGUF architectures); the defaults are llama2.c's ----
  std::string architecture = "llama";
  int explicit_head_dim = 0;  // 0: dim / n_heads; gemma2 has heads wider than dim / n_heads
  float rms_norm_eps = kRmsNormEps;
  float rope_theta = kRopeTheta;
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  int rope_dims = 0;  // leading dims of each head that RoPE rotates; 0: all
  bool qkv_bias = false;  // qwen2
  bool post_norms = false;  // gemma2: RMSNorm after attention and after the FFN, before the residual add
  FeedForwardActivation activation = FeedForwardActivation::kSilu;
  float embedding_scale = 0;  // 0: none; gemma: sqrt(dim)
  float attn_logit_softcap = 0;  // 0: none; else scores = cap * tanh(scores / cap)
  float final_logit_softcap = 0;  // the same on the output logits
  int sliding_window = 0;  // 0: none; else the window of the sliding layers, in tokens
  // Which layers slide: layer l does when l % period < period - 1 (gemma2: 2, even layers slide;
  // gemma3: 6). 0 with a window: every layer slides.
  int sliding_window_period = 0;
  bool qk_norm = false;  // gemma3, qwen3: per-head RMSNorm of q and k (weights [head_dim]) before RoPE
  bool scale_queries = false;  // phi3: q multiplied by 1/sqrt(head_dim) before q.k (scores then unscaled)
  // Mixture of experts (qwen3moe): n_experts > 0 replaces the dense feed-forward block by
  // n_experts SwiGLU experts of expert_hidden_dim, a router [n_experts][dim] (softmax), the
  // n_experts_used most probable experts per token, their probabilities renormalised to sum 1
  // when expert_weights_norm, then times expert_weights_scale.
  int n_experts = 0;
  int n_experts_used = 0;
  int expert_hidden_dim = 0;
  bool expert_weights_norm = false;
  float expert_weights_scale = 1;
  float rope_theta_sliding = 0;  // gemma3: the sliding layers' RoPE base; 0: rope_theta
  float rope_scale_full = 1;  // gemma3: linear RoPE scaling of the other layers (frequencies / factor)
  // phi3 LongRoPE (rope_factors_long / rope_factors_short): the context the model was trained at
  // before its extension. The frequencies are divided by the long factors when seq_len exceeds it
  // (uses_long_rope_factors), else by the short ones; 0: no LongRoPE.
  int rope_original_context = 0;
  float rope_attn_factor = 1;  // every RoPE cos and sin multiplied by it (rope.scaling.attn_factor)
  // Allocate every layer for every token in one full-attention KV-cache group even when layers
  // slide (the uniform allocation hybrid groups are measured against); sliding layers still
  // attend only to their window, through the attention mask.
  bool uniform_kv_allocation = false;

  int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : dim / n_heads; }
  int q_dim() const { return n_heads * head_dim(); }  // width of the queries (= dim unless explicit)
  int kv_dim() const { return n_kv_heads * head_dim(); }  // K (or V) floats per token per layer
  int queries_per_kv_head() const { return n_heads / n_kv_heads; }
  int rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim(); }
  bool is_moe() const { return n_experts > 0; }
  bool uses_long_rope_factors() const { return rope_original_context > 0 && seq_len > rope_original_context; }

  // KV-cache groups (vLLM's hybrid allocator): layers that share one block table per request.
  // A model with one kind of layer (or uniform_kv_allocation) has one group of every layer.
  // Otherwise each kind is split, in layer order, into groups of kv_arena_layers() layers by
  // vLLM's uniform-page rule (uniform_group_layers; more per group if the rule would make more
  // than kMaxKVCacheGroups), the full-attention groups first: Gemma 2's alternating layers make
  // one full and one sliding group, Gemma 3's five sliding layers to every full one make groups
  // of one layer each. Every block then carries kv_arena_layers() layer pages, whichever group
  // owns it, so one arena serves all groups without a group wasting another's layers; only the
  // last group of a kind may carry padding layers (kv_padding_layers() in all). Layer l lives at
  // arena layer arena_layer(l) of the blocks its group kv_cache_group(l) owns.
  bool is_sliding_layer(int layer) const;
  int num_kv_cache_groups() const;
  int kv_cache_group(int layer) const;
  int arena_layer(int layer) const;
  int kv_arena_layers() const;
  int kv_padding_layers() const { return num_kv_cache_groups() * kv_arena_layers() - n_layers; }
  std::vector<KVCacheGroupSpec> kv_cache_groups(int block_size, DType dtype = DType::kF32) const;

  // Trained parameters (the llama2.c file also holds 2 * seq_len * head_dim / 2 unused RoPE floats).
  int64_t num_parameters() const;

  // What the KV cache stores per token and layer for this model, for an arena of any block size
  // and element type (f32 reproduces llama2.c exactly; f16/bf16 halve the memory). The spec of
  // group 0 (full attention, or sliding when every layer slides).
  KVCacheSpec kv_cache_spec(int block_size, DType dtype = DType::kF32) const;

  // Throws ConfigError naming the first bad field: every field positive, dim divisible by
  // n_heads (unless head_dim is explicit), n_heads divisible by n_kv_heads, head_dim and
  // rope dims even (RoPE rotates pairs), finite positive eps and theta, non-negative caps.
  void validate() const;

  // "dim=64 hidden_dim=172 n_layers=5 n_heads=8 n_kv_heads=4 vocab_size=512 seq_len=512 (shared classifier)"
  std::string describe() const;

  bool operator==(const ModelConfig&) const = default;
};

}  // namespace pagedkv
