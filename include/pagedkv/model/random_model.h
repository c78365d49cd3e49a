// A deterministic random-weight LLaMA-shaped model, for demos and benchmarks without a checkpoint.
//
// Every weight is a pure function of (seed, tensor, index) — a counter-based hash, not a stateful
// generator — so the same seed gives bit-identical weights on every machine and thread count.
// Matrices are uniform in ±sqrt(3 / in) (unit output variance on RMS-normalised input), RMSNorm
// gains are 1, embeddings uniform in ±1. The output is not language, but the compute, memory
// traffic and KV-cache footprint are exactly those of a trained model of the same shape.
#pragma once

#include <cstdint>
#include <memory>

#include "pagedkv/model/model.h"

namespace pagedkv {

// The built-in demo shape: dim 128, hidden 352, 4 layers, 8 query / 4 KV heads (head_dim 16),
// vocab 512 (so the stories260K tokenizer can print its tokens), seq_len 2048, shared classifier.
ModelConfig builtin_random_model_config();
// The same shape with Gemma 2's layer pattern: even layers attend to a 32-token sliding window,
// odd layers to everything (two KV-cache groups: full attention, then sliding).
ModelConfig builtin_random_hybrid_model_config();

// Generates a model of `config` (validated; throws ConfigError) that owns its weights.
std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed);

}  // namespace pagedkv
