// A model read from a GGUF file: llama.cpp's hyper-parameter keys and tensor names mapped onto
// ModelConfig and TransformerWeights, the weights left in the memory-mapped file.
//
// Architectures (general.architecture):
//   llama   Llama 2 / 3, TinyLlama, llama2.c exports: RoPE on adjacent pairs, GQA, optional
//           rope_freqs.weight (Llama 3's frequency divisors), output.weight or tied embedding;
//   qwen2   q/k/v biases, RoPE on halves (NeoX), tied output when output.weight is absent;
//   gemma2  GeGLU, post-attention and post-FFN norms, embedding scaled by sqrt(dim), attention and
//           final logit soft-caps, sliding window on even layers, always tied output;
//   gemma3  gemma2's block without soft-caps plus qk-norm (attn_q_norm / attn_k_norm: RMSNorm of
//           each head before RoPE); sliding window on five layers of six (llama.cpp's pattern 6,
//           or attention.sliding_window_pattern); sliding layers use RoPE base 10000 unscaled,
//           the others rope.freq_base (default 1e6) with linear rope.scaling.factor; output.weight
//           or tied. Attention scale 1/sqrt(head_dim) (llama.cpp uses 1/sqrt(dim/heads) for 27B only);
//   qwen3   qwen2 without biases plus qk-norm; head_dim from attention.key_length; tied output
//           when output.weight is absent;
//   phi3    fused attn_qkv [q; k; v] and ffn_up [gate; up], split into row ranges of the one
//           tensor; q scaled by 1/sqrt(head_dim) before q.k; LongRoPE (rope_factors_long /
//           rope_factors_short, both required): frequencies divided by the long set when the
//           context exceeds rope.scaling.original_context_length (default context_length), else
//           by the short set, chosen at load as llama.cpp does; cos and sin times
//           rope.scaling.attn_factor (default 1);
//   qwen3moe  qwen3's attention with a mixture-of-experts FFN: router ffn_gate_inp (F32),
//           softmax, expert_used_count of expert_count experts, renormalised (expert_weights_norm,
//           default true) and scaled (expert_weights_scale); stacked 3-D ffn_{gate,up,down}_exps.
// Anything else is a FormatError naming the architecture. Weight matrices may be of any type
// is_runnable_weight_type accepts (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the K-quants,
// IQ4_NL, IQ4_XS), tensor by tensor; norms and biases must be F32 (as llama.cpp writes them). A missing tensor, a
// wrong shape, a type pagedkv cannot run or a missing key is a FormatError naming it.
#pragma once

#include <memory>
#include <string>

#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/model.h"

namespace pagedkv {

class GgufModel final : public Model {
 public:
  // Maps and validates `path`. `context_length` > 0 replaces the file's context length (the
  // model's seq_len), as llama.cpp's n_ctx does: RoPE has no built-in limit. It also decides
  // phi3's LongRoPE factor set.
  explicit GgufModel(const std::string& path, int context_length = 0);
  // A model over an already opened file (which the model keeps).
  explicit GgufModel(std::unique_ptr<GgufFile> file, int context_length = 0);

  const GgufFile& file() const { return *file_; }

 private:
  std::unique_ptr<GgufFile> file_;
};

// The architectures GgufModel runs, for messages: "llama, qwen2, gemma2, gemma3".
const char* supported_gguf_architectures();

}  // namespace pagedkv
