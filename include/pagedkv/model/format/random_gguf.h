// Random-weight GGUF files with a real model's shape, for benchmarks that need a real model's
// memory traffic and compute without its download. Written with the project's own GgufWriter;
// every weight is a counter-based hash of (seed, tensor, index), uniform in ±sqrt(3 / in) (unit
// output variance on RMS-normalised input), norm gains 1, embeddings ±1.
#pragma once

#include <cstdint>
#include <string>

#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/format/tensor_type.h"
#include "pagedkv/model/format/weight_mix.h"

namespace pagedkv {

struct RandomModelShape {
  std::string name;
  std::string architecture = "llama";  // llama, or qwen3moe (qk-norm attention, mixture-of-experts FFN)
  int dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, context = 0;
  float rope_theta = 10000.0f;
  bool tied_embeddings = true;  // no output.weight: the logits reuse token_embd
  int head_dim = 0;  // 0: dim / heads
  int experts = 0, experts_used = 0;  // qwen3moe: experts per layer, and per token; ffn is one expert's width

  int attention_head_dim() const { return head_dim > 0 ? head_dim : dim / heads; }
};

// "llama-3.2-1b": hidden 2048, 16 layers, 32 heads / 8 KV heads (head dim 64), FFN 8192, vocab
// 128256, tied embeddings, rope theta 500000. "qwen3moe-8l-32e": a qwen3moe of Qwen3-30B-A3B's
// layer (hidden 2048, 32 heads / 4 KV heads of 128, experts of width 768, 8 per token, vocab
// 151936, tied) at 8 layers of 32 experts (1.7 B weights, 0.7 B read per token);
// "qwen3moe-8l-32e-dense" its dense twin (the same attention, one FFN of 8 x 768: the MoE's
// active weights, llama architecture). "tiny" and
// "tiny-moe": the same structures at dim 64 / 2 layers / vocab 512, for tests. Anything else
// throws ConfigError.
RandomModelShape random_model_shape(const std::string& name);

// Writes a GGUF of `shape` with its matrices (token_embd included) in the types of `mix` (every
// matrix F32, F16, BF16, Q8_0, Q4_0 or Q6_K, or llama.cpp's Q4_K_M, Q5_K_M and IQ4_XS mixes:
// weight_mix.h) and its norms and router in F32. With `tokenizer`, every `tokenizer.*` key of that file
// is copied (so that servers can tokenize text; its token count must equal shape.vocab, else
// ConfigError). Throws Error when the file cannot be written.
void write_random_gguf(const RandomModelShape& shape, const WeightMix& mix, uint64_t seed, const std::string& path,
                       const GgufFile* tokenizer = nullptr);

}  // namespace pagedkv
