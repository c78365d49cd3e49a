#include "random_gguf.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/gguf_writer.h"

namespace pagedkv::cli {

namespace {

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

LlamaShape llama_shape(const std::string& name) {
  if (name == "llama-3.2-1b") return {name, 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, true};
  if (name == "tiny") return {name, 64, 2, 4, 2, 96, 512, 256, 500000.0f, true};
  throw ConfigError(fmt::format("unknown model shape '{}' (known: llama-3.2-1b, tiny)", name));
}

void write_random_llama_gguf(const LlamaShape& s, TensorType type, uint64_t seed, const std::string& path) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", fmt::format("random-{}", s.name));
  w.add_u32("llama.context_length", static_cast<uint32_t>(s.context));
  w.add_u32("llama.embedding_length", static_cast<uint32_t>(s.dim));
  w.add_u32("llama.block_count", static_cast<uint32_t>(s.layers));
  w.add_u32("llama.feed_forward_length", static_cast<uint32_t>(s.ffn));
  w.add_u32("llama.attention.head_count", static_cast<uint32_t>(s.heads));
  w.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  w.add_f32("llama.rope.freq_base", s.rope_theta);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);

  const int64_t kv_dim = static_cast<int64_t>(s.dim) / s.heads * s.kv_heads;
  std::vector<float> values;
  uint64_t tensor = 0;
  // A [rows][cols] tensor (GGUF ne = {cols, rows}), amplitude * U[-1, 1), its own counter stream.
  auto add = [&](const std::string& name, TensorType t, int64_t cols, int64_t rows, float amplitude) {
    values.resize(static_cast<size_t>(cols * rows));
    const uint64_t stream = mix64(seed ^ (++tensor * 0x9E3779B97F4A7C15ull));
    const auto n = static_cast<int64_t>(values.size());
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t bits = mix64(stream + static_cast<uint64_t>(i));
      values[static_cast<size_t>(i)] = amplitude * (static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
    if (rows == 1) w.add_tensor_f32(name, t, {cols}, values);
    else w.add_tensor_f32(name, t, {cols, rows}, values);
  };
  auto norm = [&](const std::string& name) {
    values.assign(static_cast<size_t>(s.dim), 1.0f);
    w.add_tensor_f32(name, TensorType::kF32, {s.dim}, values);
  };
  const float in_dim = std::sqrt(3.0f / static_cast<float>(s.dim)), in_ffn = std::sqrt(3.0f / static_cast<float>(s.ffn));
  add("token_embd.weight", type, s.dim, s.vocab, 1.0f);
  norm("output_norm.weight");
  if (!s.tied_embeddings) add("output.weight", type, s.dim, s.vocab, in_dim);
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    norm(b + "attn_norm.weight");
    norm(b + "ffn_norm.weight");
    add(b + "attn_q.weight", type, s.dim, s.dim, in_dim);
    add(b + "attn_k.weight", type, s.dim, kv_dim, in_dim);
    add(b + "attn_v.weight", type, s.dim, kv_dim, in_dim);
    add(b + "attn_output.weight", type, s.dim, s.dim, in_dim);
    add(b + "ffn_gate.weight", type, s.dim, s.ffn, in_dim);
    add(b + "ffn_up.weight", type, s.dim, s.ffn, in_dim);
    add(b + "ffn_down.weight", type, s.ffn, s.dim, in_ffn);
  }
  w.write(path);
}

}  // namespace pagedkv::cli
