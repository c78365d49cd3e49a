// Random-weight GGUF files with a real llama-family model's shape, for benchmarks that need a
// real model's memory traffic and compute without its download. Written with the project's own
// GgufWriter; every weight is a counter-based hash of (seed, tensor, index), uniform in
// ±sqrt(3 / in) (unit output variance on RMS-normalised input), norm gains 1, embeddings ±1.
#pragma once

#include <cstdint>
#include <string>

#include "pagedkv/model/format/tensor_type.h"

namespace pagedkv::cli {

struct LlamaShape {
  std::string name;
  int dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, context = 0;
  float rope_theta = 10000.0f;
  bool tied_embeddings = true;  // no output.weight: the logits reuse token_embd
};

// "llama-3.2-1b": hidden 2048, 16 layers, 32 heads / 8 KV heads (head dim 64), FFN 8192, vocab
// 128256, tied embeddings, rope theta 500000. "tiny": the same structure at dim 64 / 2 layers /
// vocab 512, for tests. Anything else throws ConfigError.
LlamaShape llama_shape(const std::string& name);

// Writes a `llama` GGUF of `shape` with its matrices (token_embd included) in `type` (F32, F16,
// BF16, Q8_0 or Q4_0) and its norms in F32. Throws Error when the file cannot be written.
void write_random_llama_gguf(const LlamaShape& shape, TensorType type, uint64_t seed, const std::string& path);

}  // namespace pagedkv::cli
