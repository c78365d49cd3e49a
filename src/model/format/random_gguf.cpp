#include "pagedkv/model/format/random_gguf.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/gguf_writer.h"

namespace pagedkv {

namespace {

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Copies every `tokenizer.*` key of `source` into `w`, each in its own GGUF type.
void copy_tokenizer_keys(const GgufFile& source, const RandomModelShape& s, GgufWriter& w) {
  const GgufValue* tokens = source.find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type() != GgufType::kArray)
    throw ConfigError(fmt::format("{} has no tokenizer (no tokenizer.ggml.tokens array)", source.name()));
  if (tokens->size() != static_cast<uint64_t>(s.vocab))
    throw ConfigError(fmt::format("the tokenizer of {} has {} tokens; shape {} has a vocabulary of {}", source.name(),
                                  tokens->size(), s.name, s.vocab));
  for (const auto& [key, v] : source.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    switch (v.type()) {
      case GgufType::kString:
        w.add_string(key, v.as_string(key));
        break;
      case GgufType::kBool:
        w.add_bool(key, v.as_bool(key));
        break;
      case GgufType::kF32:
      case GgufType::kF64:
        w.add_f32(key, static_cast<float>(v.as_float(key)));
        break;
      case GgufType::kArray: {
        const uint64_t n = v.size();
        if (v.element_type() == GgufType::kString) {
          const auto views = v.strings(key);
          w.add_string_array(key, std::vector<std::string>(views.begin(), views.end()));
        } else if (v.element_type() == GgufType::kF32 || v.element_type() == GgufType::kF64) {
          std::vector<float> values(n);
          for (uint64_t i = 0; i < n; ++i) values[i] = static_cast<float>(v.number_at(i));
          w.add_f32_array(key, values);
        } else {  // integer arrays (token types) as int32, the type llama.cpp writes
          std::vector<int32_t> values(n);
          for (uint64_t i = 0; i < n; ++i) values[i] = static_cast<int32_t>(v.int_at(i));
          w.add_i32_array(key, values);
        }
        break;
      }
      default:  // integers: token ids and the like
        if (v.as_int(key) < 0) w.add_i32(key, static_cast<int32_t>(v.as_int(key)));
        else w.add_u32(key, static_cast<uint32_t>(v.as_int(key)));
    }
  }
}

}  // namespace

RandomModelShape random_model_shape(const std::string& name) {
  RandomModelShape s;
  s.name = name;
  if (name == "llama-3.2-1b") {
    s.dim = 2048, s.layers = 16, s.heads = 32, s.kv_heads = 8, s.ffn = 8192, s.vocab = 128256, s.context = 131072;
    s.rope_theta = 500000.0f;
  } else if (name == "tiny") {
    s.dim = 64, s.layers = 2, s.heads = 4, s.kv_heads = 2, s.ffn = 96, s.vocab = 512, s.context = 256;
    s.rope_theta = 500000.0f;
  } else if (name == "qwen3moe-8l-32e") {
    s.architecture = "qwen3moe";
    s.dim = 2048, s.layers = 8, s.heads = 32, s.kv_heads = 4, s.head_dim = 128, s.ffn = 768, s.vocab = 151936;
    s.context = 40960, s.rope_theta = 1000000.0f, s.experts = 32, s.experts_used = 8;
  } else if (name == "qwen3moe-8l-32e-dense") {
    // The dense model with qwen3moe-8l-32e's active weights: its attention and one FFN as wide as
    // the 8 experts a token uses (8 x 768), for "a MoE step against a dense one".
    s.dim = 2048, s.layers = 8, s.heads = 32, s.kv_heads = 4, s.head_dim = 128, s.ffn = 8 * 768, s.vocab = 151936;
    s.context = 40960, s.rope_theta = 1000000.0f;
  } else if (name == "tiny-moe") {
    s.architecture = "qwen3moe";
    s.dim = 64, s.layers = 2, s.heads = 4, s.kv_heads = 2, s.head_dim = 32, s.ffn = 32, s.vocab = 512, s.context = 256;
    s.rope_theta = 1000000.0f, s.experts = 4, s.experts_used = 2;
  } else {
    throw ConfigError(
        fmt::format("unknown model shape '{}' (known: llama-3.2-1b, qwen3moe-8l-32e, qwen3moe-8l-32e-dense, tiny, "
                    "tiny-moe)",
                    name));
  }
  return s;
}

void write_random_gguf(const RandomModelShape& s, const WeightMix& mix, uint64_t seed, const std::string& path,
                       const GgufFile* tokenizer) {
  const bool moe = s.architecture == "qwen3moe";
  if (!moe && s.architecture != "llama")
    throw ConfigError(fmt::format("cannot write architecture '{}'", s.architecture));
  GgufWriter w;
  const std::string a = s.architecture + ".";
  w.add_string("general.architecture", s.architecture);
  w.add_string("general.name", fmt::format("random-{}", s.name));
  w.add_u32("general.file_type", mix.file_type());
  w.add_u32(a + "context_length", static_cast<uint32_t>(s.context));
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(s.dim));
  w.add_u32(a + "block_count", static_cast<uint32_t>(s.layers));
  w.add_u32(a + "feed_forward_length", static_cast<uint32_t>(s.ffn));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(s.heads));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  w.add_f32(a + "rope.freq_base", s.rope_theta);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.head_dim > 0) {
    w.add_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.add_u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  if (moe) {
    w.add_u32(a + "expert_count", static_cast<uint32_t>(s.experts));
    w.add_u32(a + "expert_used_count", static_cast<uint32_t>(s.experts_used));
    w.add_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.ffn));
  }
  if (tokenizer != nullptr) copy_tokenizer_keys(*tokenizer, s, w);

  const int64_t head_dim = s.attention_head_dim(), q_dim = head_dim * s.heads, kv_dim = head_dim * s.kv_heads;
  std::vector<float> values;
  uint64_t tensor = 0;
  // A [stack][rows][cols] tensor (GGUF ne = {cols, rows, stack}), amplitude * U[-1, 1), its own
  // counter stream.
  auto add = [&](const std::string& name, TensorType t, int64_t cols, int64_t rows, float amplitude,
                 int64_t stack = 1) {
    values.resize(static_cast<size_t>(cols * rows * stack));
    const uint64_t stream = mix64(seed ^ (++tensor * 0x9E3779B97F4A7C15ull));
    const auto n = static_cast<int64_t>(values.size());
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t bits = mix64(stream + static_cast<uint64_t>(i));
      values[static_cast<size_t>(i)] = amplitude * (static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
    if (stack > 1) w.add_tensor_f32(name, t, {cols, rows, stack}, values);
    else if (rows == 1) w.add_tensor_f32(name, t, {cols}, values);
    else w.add_tensor_f32(name, t, {cols, rows}, values);
  };
  auto norm = [&](const std::string& name, int64_t n) {
    values.assign(static_cast<size_t>(n), 1.0f);
    w.add_tensor_f32(name, TensorType::kF32, {n}, values);
  };
  auto amplitude = [](int64_t in) { return std::sqrt(3.0f / static_cast<float>(in)); };
  using Role = WeightMix::Role;
  const int gqa = s.heads / s.kv_heads;
  auto type_of = [&](Role role, int layer) { return mix.type_of(role, layer, s.layers, gqa); };
  // Tied embeddings are the output matrix too, and get its type (as llama-quantize gives them).
  add("token_embd.weight", type_of(s.tied_embeddings ? Role::kOutput : Role::kEmbedding, 0), s.dim, s.vocab, 1.0f);
  norm("output_norm.weight", s.dim);
  if (!s.tied_embeddings) add("output.weight", type_of(Role::kOutput, 0), s.dim, s.vocab, amplitude(s.dim));
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    norm(b + "attn_norm.weight", s.dim);
    norm(b + "ffn_norm.weight", s.dim);
    add(b + "attn_q.weight", type_of(Role::kAttnQ, l), s.dim, q_dim, amplitude(s.dim));
    add(b + "attn_k.weight", type_of(Role::kAttnK, l), s.dim, kv_dim, amplitude(s.dim));
    add(b + "attn_v.weight", type_of(Role::kAttnV, l), s.dim, kv_dim, amplitude(s.dim));
    add(b + "attn_output.weight", type_of(Role::kAttnOutput, l), q_dim, s.dim, amplitude(q_dim));
    if (moe) {
      norm(b + "attn_q_norm.weight", head_dim);
      norm(b + "attn_k_norm.weight", head_dim);
      add(b + "ffn_gate_inp.weight", TensorType::kF32, s.dim, s.experts, amplitude(s.dim));
      add(b + "ffn_gate_exps.weight", type_of(Role::kFfnGateUp, l), s.dim, s.ffn, amplitude(s.dim), s.experts);
      add(b + "ffn_up_exps.weight", type_of(Role::kFfnGateUp, l), s.dim, s.ffn, amplitude(s.dim), s.experts);
      add(b + "ffn_down_exps.weight", type_of(Role::kFfnDown, l), s.ffn, s.dim, amplitude(s.ffn), s.experts);
    } else {
      add(b + "ffn_gate.weight", type_of(Role::kFfnGateUp, l), s.dim, s.ffn, amplitude(s.dim));
      add(b + "ffn_up.weight", type_of(Role::kFfnGateUp, l), s.dim, s.ffn, amplitude(s.dim));
      add(b + "ffn_down.weight", type_of(Role::kFfnDown, l), s.ffn, s.dim, amplitude(s.ffn));
    }
  }
  w.write(path);
}

}  // namespace pagedkv
