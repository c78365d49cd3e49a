#include "pagedkv/model/gguf_model.h"

#include <cmath>
#include <limits>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

namespace {

enum class Arch { kLlama, kQwen2, kQwen3, kPhi3, kGemma2, kGemma3, kQwen3Moe };

class Loader {
 public:
  explicit Loader(const GgufFile& f) : f_(f) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(fmt::format("GGUF model '{}': {}", f_.name(), what));
  }

  // A positive int hyper-parameter `<arch>.<key>`; `fallback` < 0 means required.
  int hparam(const std::string& key, int64_t fallback = -1) const {
    const std::string full = prefix_ + key;
    const int64_t v = f_.find(full) ? f_.get_int(full) : fallback;
    if (v < 0) fail(fmt::format("lacks the key '{}'", full));
    if (v == 0 || v > std::numeric_limits<int32_t>::max()) fail(fmt::format("{} = {} is out of range", full, v));
    return static_cast<int>(v);
  }
  float fparam(const std::string& key, double fallback) const {
    const std::string full = prefix_ + key;
    const double v = f_.get_float(full, fallback);
    if (!std::isfinite(v)) fail(fmt::format("{} = {} is not finite", full, v));
    return static_cast<float>(v);
  }

  // A tensor of the expected shape (GGUF order: ne[0] = cols), or absent if !required.
  WeightTensor tensor(const std::string& name, int64_t cols, int64_t rows, bool required = true) const {
    const GgufTensor* t = f_.find_tensor(name);
    if (t == nullptr) {
      if (required) fail(fmt::format("lacks the tensor '{}'", name));
      return {};
    }
    const bool vector = rows == 1;
    const bool shape_ok =
        vector ? t->elements() == cols && t->ne[0] == cols : t->ne.size() == 2 && t->ne[0] == cols && t->ne[1] == rows;
    if (!shape_ok) {
      std::string ne;
      for (int64_t d : t->ne) ne += (ne.empty() ? "" : ", ") + std::to_string(d);
      fail(vector ? fmt::format("tensor '{}' has shape [{}], expected [{}]", name, ne, cols)
                  : fmt::format("tensor '{}' has shape [{}], expected [{}, {}]", name, ne, cols, rows));
    }
    if (vector && t->type != TensorType::kF32)
      fail(fmt::format("tensor '{}' is {}; norms and biases must be F32", name, tensor_type_name(t->type)));
    if (!is_runnable_weight_type(t->type))
      fail(fmt::format("tensor '{}' has type {}, which pagedkv cannot run (supported: {})", name,
                       tensor_type_name(t->type), runnable_weight_type_names()));
    return WeightTensor{t->type, t->data, rows, cols};
  }

  // A 3-D tensor [cols, rows, n] (n matrices stacked, GGUF's expert tensors) as one matrix of
  // n * rows rows.
  WeightTensor stacked_tensor(const std::string& name, int64_t cols, int64_t rows, int64_t n) const {
    const GgufTensor* t = f_.find_tensor(name);
    if (t == nullptr) fail(fmt::format("lacks the tensor '{}'", name));
    if (t->ne.size() != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n) {
      std::string ne;
      for (int64_t dim : t->ne) ne += (ne.empty() ? "" : ", ") + std::to_string(dim);
      fail(fmt::format("tensor '{}' has shape [{}], expected [{}, {}, {}]", name, ne, cols, rows, n));
    }
    if (!is_runnable_weight_type(t->type))
      fail(fmt::format("tensor '{}' has type {}, which pagedkv cannot run (supported: {})", name,
                       tensor_type_name(t->type), runnable_weight_type_names()));
    return WeightTensor{t->type, t->data, rows * n, cols};
  }

  // Keys an architecture may carry that change the computation in ways pagedkv does not
  // implement: refused, naming the key, unless they hold the value that means "nothing special".
  void refuse_key_unless(const std::string& key, double harmless) const {
    const std::string full = prefix_ + key;
    if (f_.find(full) && f_.get_float(full, harmless) != harmless)
      fail(fmt::format("{} = {} is not supported", full, f_.get_float(full, harmless)));
  }

  void load(ModelConfig& c, TransformerWeights& w, int context_length) {
    const std::string arch_name = f_.get_string("general.architecture");
    Arch arch;
    if (arch_name == "llama") arch = Arch::kLlama;
    else if (arch_name == "qwen2") arch = Arch::kQwen2;
    else if (arch_name == "gemma2") arch = Arch::kGemma2;
    else if (arch_name == "gemma3") arch = Arch::kGemma3;
    else if (arch_name == "qwen3") arch = Arch::kQwen3;
    else if (arch_name == "phi3") arch = Arch::kPhi3;
    else if (arch_name == "qwen3moe") arch = Arch::kQwen3Moe;
    else fail(fmt::format("unsupported architecture '{}' (supported: {})", arch_name, supported_gguf_architectures()));
    prefix_ = arch_name + ".";

    c.architecture = arch_name;
    c.dim = hparam("embedding_length");
    c.n_layers = hparam("block_count");
    // A mixture of experts does not use feed_forward_length (real Qwen3-MoE files carry it anyway).
    c.hidden_dim = arch == Arch::kQwen3Moe && !f_.find(prefix_ + "feed_forward_length")
                       ? hparam("expert_feed_forward_length")
                       : hparam("feed_forward_length");
    c.n_heads = hparam("attention.head_count");
    c.n_kv_heads = hparam("attention.head_count_kv", c.n_heads);
    c.seq_len = context_length > 0 ? context_length : hparam("context_length");
    c.rms_norm_eps = fparam("attention.layer_norm_rms_epsilon", 1e-5);
    c.rope_theta = fparam("rope.freq_base", 10000.0);
    if (f_.find(prefix_ + "attention.key_length")) {
      const int k = hparam("attention.key_length"), v = hparam("attention.value_length", k);
      if (k != v) fail(fmt::format("key_length {} differs from value_length {} (not supported)", k, v));
      if (k != c.dim / c.n_heads || c.dim % c.n_heads != 0) c.explicit_head_dim = k;
    }
    if (f_.find(prefix_ + "rope.dimension_count")) {
      c.rope_dims = hparam("rope.dimension_count");
      if (c.rope_dims == c.head_dim()) c.rope_dims = 0;
    }
    switch (arch) {
      case Arch::kLlama:
        break;
      case Arch::kQwen2:
        c.rope_style = RopeStyle::kHalves;
        c.qkv_bias = true;
        break;
      case Arch::kQwen3:
        c.rope_style = RopeStyle::kHalves;
        c.qk_norm = true;
        break;
      case Arch::kQwen3Moe:
        // qwen3's attention; the FFN is a mixture of experts (llama.cpp's build_moe_ffn as its
        // qwen3moe graph calls it: softmax router, top-k, weights renormalised, no shared expert).
        c.rope_style = RopeStyle::kHalves;
        c.qk_norm = true;
        c.n_experts = hparam("expert_count");
        c.n_experts_used = hparam("expert_used_count");
        c.expert_hidden_dim = hparam("expert_feed_forward_length");
        if (c.n_experts_used > c.n_experts)
          fail(fmt::format("{}expert_used_count = {} exceeds expert_count = {}", prefix_, c.n_experts_used,
                           c.n_experts));
        c.expert_weights_norm = f_.get_bool(prefix_ + "expert_weights_norm", true);
        c.expert_weights_scale = fparam("expert_weights_scale", 1.0);
        if (c.expert_weights_scale <= 0) fail(fmt::format("{}expert_weights_scale must be positive", prefix_));
        refuse_key_unless("expert_gating_func", 1);  // 1: softmax
        refuse_key_unless("expert_shared_count", 0);
        break;
      case Arch::kPhi3:
        // Fused attn_qkv and gate+up (split below); q scaled before the product. llama.cpp
        // ignores phi3's attention.sliding_window (its SWA is disabled), and so do we.
        c.rope_style = RopeStyle::kHalves;
        c.scale_queries = true;
        refuse_key_unless("rope.scaling.factor", 1);
        // LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini), as llama.cpp runs it: the frequency
        // divisors are the long factors when the context (seq_len, llama.cpp's n_ctx_seq) exceeds
        // rope.scaling.original_context_length (default: the file's context_length), else the
        // short ones, fixed at load; rope.scaling.attn_factor (default 1) scales cos and sin.
        if (f_.find_tensor("rope_factors_long.weight") || f_.find_tensor("rope_factors_short.weight"))
          c.rope_original_context = hparam("rope.scaling.original_context_length", hparam("context_length"));
        c.rope_attn_factor = fparam("rope.scaling.attn_factor", 1.0);
        break;
      case Arch::kGemma2:
        c.rope_style = RopeStyle::kHalves;
        c.post_norms = true;
        c.activation = FeedForwardActivation::kGeluTanh;
        c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
        // llama.cpp's defaults when the keys are absent (Gemma 2's published values).
        c.attn_logit_softcap = fparam("attn_logit_softcapping", 50.0);
        c.final_logit_softcap = fparam("final_logit_softcapping", 30.0);
        c.sliding_window = hparam("attention.sliding_window", 4096);
        c.sliding_window_period = 2;
        break;
      case Arch::kGemma3:
        // Gemma 2's block without soft-caps, plus qk-norm; five sliding layers then one global
        // (llama.cpp's swa pattern 6, or the file's own); sliding layers use RoPE base 10000
        // unscaled, the global ones rope.freq_base with the file's linear scaling.
        c.rope_style = RopeStyle::kHalves;
        c.post_norms = true;
        c.qk_norm = true;
        c.activation = FeedForwardActivation::kGeluTanh;
        c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
        c.rope_theta = fparam("rope.freq_base", 1000000.0);
        c.rope_theta_sliding = 10000.0f;
        c.sliding_window = hparam("attention.sliding_window");
        c.sliding_window_period = hparam("attention.sliding_window_pattern", 6);
        if (f_.find(prefix_ + "rope.scaling.type")) {
          const std::string type = f_.get_string(prefix_ + "rope.scaling.type");
          if (type != "linear" && type != "none")
            fail(fmt::format("RoPE scaling '{}' is not supported (linear is)", type));
        }
        if (const float factor = fparam("rope.scaling.factor", 1.0); factor > 0) c.rope_scale_full = factor;
        break;
    }

    const GgufTensor* embd = f_.find_tensor("token_embd.weight");
    if (embd == nullptr) fail("lacks the tensor 'token_embd.weight'");
    if (embd->ne.size() != 2 || embd->ne[1] > std::numeric_limits<int32_t>::max())
      fail("tensor 'token_embd.weight' is not a [dim, vocab] matrix");
    c.vocab_size = static_cast<int>(embd->ne[1]);
    try {
      c.validate();
    } catch (const ConfigError& e) {
      fail(fmt::format("inconsistent hyper-parameters: {}", e.what()));
    }

    const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
    w.token_embedding = tensor("token_embd.weight", d, c.vocab_size);
    w.output_norm = tensor("output_norm.weight", d, 1);
    const bool tied = arch == Arch::kGemma2 || f_.find_tensor("output.weight") == nullptr;  // gemma3: optional
    w.output = tied ? w.token_embedding : tensor("output.weight", d, c.vocab_size);
    c.shared_classifier = tied;
    if (arch == Arch::kLlama) w.rope_freqs = tensor("rope_freqs.weight", c.rotary_dims() / 2, 1, false);
    if (c.rope_original_context > 0) {  // phi3 LongRoPE: both sets required, one used
      const WeightTensor long_factors = tensor("rope_factors_long.weight", c.rotary_dims() / 2, 1);
      const WeightTensor short_factors = tensor("rope_factors_short.weight", c.rotary_dims() / 2, 1);
      for (const auto& [name, factors] : {std::pair{"rope_factors_long.weight", &long_factors},
                                          std::pair{"rope_factors_short.weight", &short_factors}})
        for (const float f : std::span(factors->f32(), static_cast<size_t>(c.rotary_dims() / 2)))
          if (!(f > 0.0f) || !std::isfinite(f))
            fail(fmt::format("tensor '{}' holds {}; RoPE frequency factors must be positive", name, f));
      w.rope_freqs = c.uses_long_rope_factors() ? long_factors : short_factors;
    }
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string b = fmt::format("blk.{}.", l);
      LayerWeights lw;
      lw.attn_norm = tensor(b + "attn_norm.weight", d, 1);
      if (arch == Arch::kPhi3) {  // attn_qkv: rows 0..q-1 are Q, then K, then V
        const WeightTensor qkv = tensor(b + "attn_qkv.weight", d, q + 2 * kv);
        lw.wq = qkv.row_range(0, q);
        lw.wk = qkv.row_range(q, kv);
        lw.wv = qkv.row_range(q + kv, kv);
      } else {
        lw.wq = tensor(b + "attn_q.weight", d, q);
        lw.wk = tensor(b + "attn_k.weight", d, kv);
        lw.wv = tensor(b + "attn_v.weight", d, kv);
      }
      lw.wo = tensor(b + "attn_output.weight", q, d);
      if (c.qkv_bias) {
        lw.bq = tensor(b + "attn_q.bias", q, 1);
        lw.bk = tensor(b + "attn_k.bias", kv, 1);
        lw.bv = tensor(b + "attn_v.bias", kv, 1);
      }
      lw.ffn_norm = tensor(b + "ffn_norm.weight", d, 1);
      if (c.is_moe()) {
        const int64_t e = c.n_experts, eh = c.expert_hidden_dim;
        lw.router = tensor(b + "ffn_gate_inp.weight", d, e);
        if (lw.router.type != TensorType::kF32)
          fail(fmt::format("tensor '{}ffn_gate_inp.weight' is {}; the router must be F32", b,
                           tensor_type_name(lw.router.type)));
        lw.gate_exps = stacked_tensor(b + "ffn_gate_exps.weight", d, eh, e);
        lw.up_exps = stacked_tensor(b + "ffn_up_exps.weight", d, eh, e);
        lw.down_exps = stacked_tensor(b + "ffn_down_exps.weight", eh, d, e);
      } else if (arch == Arch::kPhi3) {  // ffn_up: rows 0..h-1 are the gate, then the up projection
        const WeightTensor gate_up = tensor(b + "ffn_up.weight", d, 2 * h);
        lw.gate = gate_up.row_range(0, h);
        lw.up = gate_up.row_range(h, h);
        lw.down = tensor(b + "ffn_down.weight", h, d);
      } else {
        lw.gate = tensor(b + "ffn_gate.weight", d, h);
        lw.up = tensor(b + "ffn_up.weight", d, h);
        lw.down = tensor(b + "ffn_down.weight", h, d);
      }
      if (c.qk_norm) {
        lw.q_norm = tensor(b + "attn_q_norm.weight", c.head_dim(), 1);
        lw.k_norm = tensor(b + "attn_k_norm.weight", c.head_dim(), 1);
      }
      if (c.post_norms) {
        lw.post_attn_norm = tensor(b + "post_attention_norm.weight", d, 1);
        lw.post_ffn_norm = tensor(b + "post_ffw_norm.weight", d, 1);
      }
      w.layers.push_back(lw);
    }
  }

 private:
  const GgufFile& f_;
  std::string prefix_;
};

}  // namespace

const char* supported_gguf_architectures() { return "llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3"; }

GgufModel::GgufModel(const std::string& path, int context_length)
    : GgufModel(std::make_unique<GgufFile>(path), context_length) {}

GgufModel::GgufModel(std::unique_ptr<GgufFile> file, int context_length) : file_(std::move(file)) {
  if (context_length < 0) throw ConfigError(fmt::format("context length must be positive, got {}", context_length));
  Loader(*file_).load(config_, tensors_, context_length);
  source_ = file_->name();
}

}  // namespace pagedkv
