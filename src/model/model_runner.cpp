#include "pagedkv/model/model_runner.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/kernels/gated_activation.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/kv_ops.h"

namespace pagedkv {

namespace {

size_t sz(int v) { return static_cast<size_t>(v); }

template <typename T>
T* grow(std::vector<T>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

const float* vector_or_null(const WeightTensor& w) { return w.present() ? w.f32() : nullptr; }

// f(t) for every token of a batch, spread over the kernel threads once the batch has `values`
// values in all (a prompt; a decode step's few tokens stay on the calling thread). The norms, RoPE,
// the gated activation and the residual adds are independent from token to token and each token's
// values are computed as on one thread: only the wall time changes, by what would otherwise run on
// one core while the others wait for the next product.
template <class F>
void for_each_token(size_t num_tokens, size_t values, F&& f) {
  constexpr size_t kMinParallelValues = size_t{1} << 16;
  const bool parallel = num_tokens > 1 && values >= kMinParallelValues;
#pragma omp parallel for schedule(static) if (parallel) num_threads(kernel_threads())
  for (size_t t = 0; t < num_tokens; ++t) f(t);
}

// x[t * d + i] += y[t * d + i]: the residual stream's adds.
void add_rows(float* x, const float* y, size_t num_tokens, size_t d) {
  for_each_token(num_tokens, num_tokens * d, [&](size_t t) {
    for (size_t i = t * d; i < (t + 1) * d; ++i) x[i] += y[i];
  });
}

// ggml's GELU (tanh approximation) as llama.cpp's CPU backend computes it: looked up by the fp16
// value of x in a table of fp16 results, and x itself (or 0) beyond |x| >= 10.
float gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float h = f16_to_f32(f32_to_f16(x));
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  const float g = 0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + kCoefA * h * h)));
  return f16_to_f32(f32_to_f16(g));
}

}  // namespace

ModelRunner::ModelRunner(const Model& model, KernelIsa isa) : config_(model.config()), isa_(resolve_isa(isa)) {
  config_.validate();
  const ModelConfig& c = config_;
  const TransformerWeights w = model.tensors();
  if (static_cast<int>(w.layers.size()) != c.n_layers)
    throw UsageError(
        fmt::format("ModelRunner: {} layers of weights for a {}-layer model", w.layers.size(), c.n_layers));
  token_embedding_ = w.token_embedding;
  output_norm_ = w.output_norm.f32();
  const int hd = c.head_dim();
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[sz(l)];
    Layer layer;
    layer.attn_norm = lw.attn_norm.f32();
    layer.post_attn_norm = vector_or_null(lw.post_attn_norm);
    layer.ffn_norm = lw.ffn_norm.f32();
    layer.post_ffn_norm = vector_or_null(lw.post_ffn_norm);
    layer.q_norm = vector_or_null(lw.q_norm);
    layer.k_norm = vector_or_null(lw.k_norm);
    if (c.qk_norm && (!layer.q_norm || !layer.k_norm))
      throw UsageError(fmt::format("ModelRunner: layer {} lacks its q/k norm weights", l));
    layer.wqkv = LinearLayer({lw.wq, lw.wk, lw.wv}, {lw.bq, lw.bk, lw.bv});
    layer.wo = LinearLayer({lw.wo});
    if (c.is_moe()) {
      if (!lw.router.present() || !lw.gate_exps.present() || !lw.up_exps.present() || !lw.down_exps.present())
        throw UsageError(fmt::format("ModelRunner: layer {} lacks its experts", l));
      layer.router = LinearLayer({lw.router});
      const int64_t eh = c.expert_hidden_dim;
      for (int e = 0; e < c.n_experts; ++e) {
        layer.expert_gate_up.push_back(
            LinearLayer({lw.gate_exps.row_range(e * eh, eh), lw.up_exps.row_range(e * eh, eh)}));
        layer.expert_down.push_back(LinearLayer({lw.down_exps.row_range(static_cast<int64_t>(e) * c.dim, c.dim)}));
      }
    } else {
      layer.gate_up = LinearLayer({lw.gate, lw.up});
      layer.down = LinearLayer({lw.down});
    }
    layer.attention.num_q_heads = c.n_heads;
    layer.attention.num_kv_heads = c.n_kv_heads;
    layer.attention.head_dim = hd;
    // phi3 scales q itself before the product (forward), llama.cpp's order of operations.
    layer.attention.scale = c.scale_queries ? 1.0f : 1.0f / std::sqrt(static_cast<float>(hd));
    layer.attention.logit_softcap = c.attn_logit_softcap;
    layer.attention.sliding_window = c.is_sliding_layer(l) ? c.sliding_window : 0;
    layer.group = c.kv_cache_group(l);
    layer.arena_layer = c.arena_layer(l);
    layers_.push_back(std::move(layer));
  }
  output_ = LinearLayer({w.output});

  // run.c: freq = 1.0f / powf(10000.0f, head_dim_index / (float)head_size) for even indices;
  // with a rope_freqs tensor (Llama 3's divisors, or the LongRoPE set phi3's loader chose) each
  // frequency is divided by its factor.
  // gemma3: full-attention layers scale theirs linearly (positions / factor), sliding layers
  // have their own base and no scaling.
  const int rot = c.rotary_dims();
  for (int i = 0; i < rot; i += 2) {
    float f = 1.0f / std::pow(c.rope_theta, static_cast<float>(i) / static_cast<float>(rot));
    if (w.rope_freqs.present()) f /= w.rope_freqs.f32()[i / 2];
    if (c.rope_scale_full != 1.0f) f /= c.rope_scale_full;
    rope_inv_freq_.push_back(f);
  }
  if (c.rope_theta_sliding > 0 || c.rope_scale_full != 1.0f) {
    const float theta = c.rope_theta_sliding > 0 ? c.rope_theta_sliding : c.rope_theta;
    for (int i = 0; i < rot; i += 2)
      rope_inv_freq_sliding_.push_back(1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(rot)));
    for (int l = 0; l < c.n_layers; ++l) layers_[sz(l)].sliding_rope = c.is_sliding_layer(l);
  }
}

size_t ModelRunner::packed_weight_bytes() const {
  size_t bytes = output_.bytes();
  for (const Layer& l : layers_) {
    bytes += l.wqkv.bytes() + l.wo.bytes() + l.gate_up.bytes() + l.down.bytes() + l.router.bytes();
    for (const LinearLayer& e : l.expert_gate_up) bytes += e.bytes();
    for (const LinearLayer& e : l.expert_down) bytes += e.bytes();
  }
  return bytes;
}

void ModelRunner::validate(const ForwardBatch& b, const KVArena& kv) const {
  const size_t t = b.token_ids.size();
  if (t == 0) throw UsageError("forward: the batch has no tokens");
  if (b.positions.size() != t || b.slot_mapping.size() != t)
    throw UsageError(fmt::format("forward: {} token ids but {} positions and {} slots", t, b.positions.size(),
                                 b.slot_mapping.size()));
  if (t > static_cast<size_t>(INT32_MAX)) throw UsageError("forward: too many tokens in one batch");
  const int num_tokens = static_cast<int>(t);

  if (kv.num_layers() != config_.kv_arena_layers() || kv.spec().num_kv_heads != config_.n_kv_heads ||
      kv.spec().head_dim != config_.head_dim())
    throw UsageError(
        fmt::format("forward: the KV arena has {} layers of {} KV heads x {} dims, the model needs "
                    "{} layers of {} x {}",
                    kv.num_layers(), kv.spec().num_kv_heads, kv.spec().head_dim, config_.kv_arena_layers(),
                    config_.n_kv_heads, config_.head_dim()));
  if (static_cast<int>(b.extra_groups.size()) != config_.num_kv_cache_groups() - 1)
    throw UsageError(fmt::format("forward: the model has {} KV-cache groups, the batch brings tables for {}",
                                 config_.num_kv_cache_groups(), b.extra_groups.size() + 1));
  for (const KVGroupTables& g : b.extra_groups)
    if (g.slot_mapping.size() != t || g.block_tables == nullptr)
      throw UsageError(fmt::format("forward: a KV-cache group has {} slots for {} tokens", g.slot_mapping.size(), t));

  for (size_t i = 0; i < t; ++i)
    if (b.token_ids[i] < 0 || b.token_ids[i] >= config_.vocab_size)
      throw UsageError(fmt::format("forward: token id {} at row {} is outside the vocabulary (0..{})", b.token_ids[i],
                                   i, config_.vocab_size - 1));

  const PagedAttentionBatch& a = b.attention;
  if (a.num_requests <= 0 || a.query_start == nullptr || a.context_lens == nullptr)
    throw UsageError("forward: the attention batch has no requests");
  if (a.query_start[0] != 0 || a.query_start[a.num_requests] != num_tokens)
    throw UsageError(fmt::format("forward: query_start must run from 0 to the token count {}, got {}..{}", num_tokens,
                                 a.query_start[0], a.query_start[a.num_requests]));
  for (int r = 0; r < a.num_requests; ++r) {
    const int begin = a.query_start[r], end = a.query_start[r + 1];
    if (end < begin || end > num_tokens)
      throw UsageError(fmt::format("forward: request {} has query rows [{}, {})", r, begin, end));
    const int first_position = a.context_lens[r] - (end - begin);
    if (first_position < 0)
      throw UsageError(fmt::format("forward: request {} has {} query tokens but context length {}", r, end - begin,
                                   a.context_lens[r]));
    if (a.context_lens[r] > config_.seq_len)
      throw UsageError(fmt::format("forward: request {} reaches context length {}, beyond the model's seq_len {}", r,
                                   a.context_lens[r], config_.seq_len));
    for (int i = begin; i < end; ++i)
      if (b.positions[sz(i)] != first_position + (i - begin))
        throw UsageError(fmt::format("forward: row {} (request {}) has position {}, expected {} (context length {})", i,
                                     r, b.positions[sz(i)], first_position + (i - begin), a.context_lens[r]));
  }
  for (size_t i = 0; i < b.logits_rows.size(); ++i)
    if (b.logits_rows[i] < 0 || b.logits_rows[i] >= num_tokens)
      throw UsageError(
          fmt::format("forward: logits row {} is outside the batch (0..{})", b.logits_rows[i], num_tokens - 1));
}

// run.c rmsnorm, row by row: ss = sum x^2 (in order) / n + eps; out = w * (x / sqrt(ss)).
void ModelRunner::rmsnorm_rows(const float* x, const float* weight, int rows, float* out) const {
  const size_t d = sz(config_.dim);
  for_each_token(sz(rows), sz(rows) * d, [&](size_t r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    float ss = 0.0f;
    for (size_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
    ss /= static_cast<float>(config_.dim);
    ss += config_.rms_norm_eps;
    ss = 1.0f / std::sqrt(ss);
    for (size_t j = 0; j < d; ++j) o[j] = weight[j] * (ss * xr[j]);
  });
}

// RMSNorm of each head of one token on its own (gemma3's qk-norm), with per-dimension gains.
void ModelRunner::rmsnorm_heads(float* x, int num_heads, const float* weight) const {
  const size_t hd = sz(config_.head_dim());
  for (size_t h = 0; h < sz(num_heads); ++h) {
    float* head = x + h * hd;
    float ss = 0.0f;
    for (size_t j = 0; j < hd; ++j) ss += head[j] * head[j];
    ss /= static_cast<float>(hd);
    ss += config_.rms_norm_eps;
    ss = 1.0f / std::sqrt(ss);
    for (size_t j = 0; j < hd; ++j) head[j] = weight[j] * (ss * head[j]);
  }
}

// The (token, expert) pairs of one wave of moe_ffn's experts, at least: a decode batch's experts
// run as one wave, in one parallel region.
constexpr size_t kExpertWavePairs = 256;

// llama.cpp's build_moe_ffn as qwen3moe calls it. Per token: p = softmax(router logits) (exp(l -
// max) times the inverse of their sum, summed in double, as ggml's soft_max); the n_experts_used
// largest p, most probable first; their weights p / (sum of the chosen p) when
// expert_weights_norm, times expert_weights_scale. Then each expert runs once for all the tokens
// routed to it (its weights read once per step, every expert in one parallel region), and each
// token's output is the sum of its experts' outputs times their weights, in the order they were
// chosen (ggml's order).
void ModelRunner::moe_ffn(const Layer& layer, const float* xb, int num_tokens, float* out) {
  const ModelConfig& c = config_;
  const size_t t_count = sz(num_tokens), d = sz(c.dim), eh = sz(c.expert_hidden_dim);
  const size_t n_exp = sz(c.n_experts), k_used = sz(c.n_experts_used);
  float* logits = grow(router_logits_, t_count * n_exp);
  layer.router.multiply(xb, d, num_tokens, logits, n_exp, isa_);
  int* choice = grow(expert_choice_, t_count * k_used);
  float* weight = grow(expert_weight_, t_count * k_used);
  std::vector<float> p(n_exp);
  std::vector<int> order(n_exp);
  for (size_t t = 0; t < t_count; ++t) {
    const float* l = logits + t * n_exp;
    const float max = *std::max_element(l, l + n_exp);
    double sum = 0;
    for (size_t e = 0; e < n_exp; ++e) {
      p[e] = std::exp(l[e] - max);
      sum += static_cast<double>(p[e]);
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (size_t e = 0; e < n_exp; ++e) p[e] *= inv;
    for (size_t e = 0; e < n_exp; ++e) order[e] = static_cast<int>(e);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[sz(a)] > p[sz(b)]; });
    float chosen_sum = 0.0f;
    for (size_t j = 0; j < k_used; ++j) {
      choice[t * k_used + j] = order[j];
      weight[t * k_used + j] = p[sz(order[j])];
      chosen_sum += p[sz(order[j])];
    }
    for (size_t j = 0; j < k_used; ++j) {
      if (c.expert_weights_norm) weight[t * k_used + j] /= chosen_sum;
      if (c.expert_weights_scale != 1.0f) weight[t * k_used + j] *= c.expert_weights_scale;
    }
  }
  // The (token, choice) pairs t * k_used + j grouped by expert, each expert's in token order (a
  // counting sort): expert e's are expert_tokens_[first[e], first[e + 1]).
  const size_t pairs = t_count * k_used;
  std::vector<int>& first = expert_first_;
  first.assign(n_exp + 1, 0);
  for (size_t i = 0; i < pairs; ++i) ++first[sz(choice[i]) + 1];
  for (size_t e = 0; e < n_exp; ++e) first[e + 1] += first[e];
  expert_tokens_.resize(pairs);
  expert_fill_.assign(first.begin(), first.end() - 1);
  for (size_t i = 0; i < pairs; ++i) expert_tokens_[sz(expert_fill_[sz(choice[i])]++)] = static_cast<int>(i);
  // Each used expert runs once for all its tokens (its weights read once per step), the experts in
  // waves of up to `wave` pairs, each wave's in one parallel region (gate and up of every expert,
  // then every down): a decode step's experts are one wave, and a long prompt's buffers stay the
  // size of one expert's tokens at most (an expert takes a token once).
  const size_t wave = std::max(t_count, kExpertWavePairs);
  float* slots = grow(expert_slots_, pairs * d);  // a token's j-th expert output lands in slots[t][j]
  float* in = grow(expert_in_, std::min(pairs, wave) * d);
  float* gate_up = grow(expert_gate_up_, std::min(pairs, wave) * 2 * eh);
  float* hidden = grow(expert_hidden_, std::min(pairs, wave) * eh);
  float* y = grow(expert_out_, std::min(pairs, wave) * d);
  for (size_t e0 = 0; e0 < n_exp;) {
    size_t e1 = e0 + 1;
    while (e1 < n_exp && sz(first[e1 + 1] - first[e0]) <= wave) ++e1;
    const size_t p0 = sz(first[e0]), n = sz(first[e1]) - p0;
    for (size_t i = 0; i < n; ++i) {
      const size_t t = sz(expert_tokens_[p0 + i]) / k_used;
      std::copy(xb + t * d, xb + t * d + d, in + i * d);
    }
    const auto run = [&](const std::vector<LinearLayer>& experts, const float* x, size_t x_width, float* rows_out,
                         size_t out_width) {
      expert_calls_.clear();
      for (size_t e = e0; e < e1; ++e) {
        const size_t at = sz(first[e]) - p0, count = sz(first[e + 1] - first[e]);
        if (count > 0)
          expert_calls_.push_back(
              {&experts[e], x + at * x_width, x_width, static_cast<int>(count), rows_out + at * out_width, out_width});
      }
      LinearLayer::multiply_all(expert_calls_, isa_);
    };
    run(layer.expert_gate_up, in, d, gate_up, 2 * eh);
    for (size_t i = 0; i < n; ++i) {
      const float* g = gate_up + i * 2 * eh;
      silu_gate(g, g + eh, hidden + i * eh, eh, isa_);
    }
    run(layer.expert_down, hidden, eh, y, d);
    for (size_t i = 0; i < n; ++i) std::copy(y + i * d, y + i * d + d, slots + sz(expert_tokens_[p0 + i]) * d);
    e0 = e1;
  }
  for (size_t t = 0; t < t_count; ++t) {
    float* o = out + t * d;
    for (size_t j = 0; j < k_used; ++j) {
      const float w = weight[t * k_used + j];
      const float* s = slots + (t * k_used + j) * d;
      for (size_t i = 0; i < d; ++i) o[i] = j == 0 ? s[i] * w : o[i] + s[i] * w;
    }
  }
}

// Rotates the first rotary_dims of each of `num_heads` heads of one token by the angles whose
// (cos, sin) pairs are in cos_sin: adjacent pairs (llama, run.c) or halves (NeoX: qwen2, gemma).
void ModelRunner::apply_rope(float* x, int num_heads, const float* cos_sin) const {
  const size_t hd = sz(config_.head_dim()), half = sz(config_.rotary_dims()) / 2;
  const bool halves = config_.rope_style == RopeStyle::kHalves;
  for (size_t h = 0; h < sz(num_heads); ++h) {
    float* head = x + h * hd;
    for (size_t i = 0; i < half; ++i) {
      const float fcr = cos_sin[2 * i], fci = cos_sin[2 * i + 1];
      float& a = halves ? head[i] : head[2 * i];
      float& b = halves ? head[i + half] : head[2 * i + 1];
      const float a0 = a, b0 = b;
      a = a0 * fcr - b0 * fci;
      b = a0 * fci + b0 * fcr;
    }
  }
}

Logits ModelRunner::forward(const ForwardBatch& batch, KVArena& kv) {
  validate(batch, kv);
  const ModelConfig& c = config_;
  const int num_tokens = static_cast<int>(batch.token_ids.size());
  const size_t t_count = sz(num_tokens);
  const size_t d = sz(c.dim), h = sz(c.hidden_dim), kvd = sz(c.kv_dim()), qd = sz(c.q_dim());
  const size_t qkv_width = qd + 2 * kvd;
  const size_t half = sz(c.rotary_dims()) / 2;

  float* x = grow(x_, t_count * d);
  float* xb = grow(xb_, t_count * d);
  float* qkv = grow(qkv_, t_count * qkv_width);
  float* q = grow(q_, t_count * qd);
  float* k = grow(k_, t_count * kvd);
  float* v = grow(v_, t_count * kvd);
  float* att = grow(att_, t_count * qd);
  float* proj = grow(proj_, t_count * d);
  float* gate_up = grow(gate_up_, t_count * 2 * h);
  float* hidden = grow(hidden_, t_count * h);
  float* rope = grow(rope_, t_count * half * 2);  // [T][rotary_dims/2] (cos, sin)
  const bool two_tables = !rope_inv_freq_sliding_.empty();
  float* rope_sliding = two_tables ? grow(rope_sliding_, t_count * half * 2) : rope;

  for (size_t t = 0; t < t_count; ++t) {
    const int64_t id = batch.token_ids[t];
    dequantize_row(token_embedding_.type, token_embedding_.row(id), {x + t * d, d});
    if (c.embedding_scale > 0)
      for (size_t j = 0; j < d; ++j) x[t * d + j] *= c.embedding_scale;
    // run.c: val = pos * freq; fcr = cosf(val); fci = sinf(val); both times the attention
    // factor (LongRoPE's magnitude scaling; 1 otherwise), so rotated dims grow by it.
    const auto pos = static_cast<float>(batch.positions[t]);
    const float m = c.rope_attn_factor;
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * rope_inv_freq_[i];
      rope[(t * half + i) * 2] = std::cos(angle) * m;
      rope[(t * half + i) * 2 + 1] = std::sin(angle) * m;
      if (two_tables) {
        const float a = pos * rope_inv_freq_sliding_[i];
        rope_sliding[(t * half + i) * 2] = std::cos(a) * m;
        rope_sliding[(t * half + i) * 2 + 1] = std::sin(a) * m;
      }
    }
  }

  for (const Layer& layer : layers_) {
    // Attention block.
    rmsnorm_rows(x, layer.attn_norm, num_tokens, xb);
    layer.wqkv.multiply(xb, d, num_tokens, qkv, qkv_width, isa_);
    for_each_token(t_count, t_count * qkv_width, [&](size_t t) {
      const float* src = qkv + t * qkv_width;
      std::copy(src, src + qd, q + t * qd);
      std::copy(src + qd, src + qd + kvd, k + t * kvd);
      std::copy(src + qd + kvd, src + qd + 2 * kvd, v + t * kvd);
      if (layer.q_norm) rmsnorm_heads(q + t * qd, c.n_heads, layer.q_norm);
      if (layer.k_norm) rmsnorm_heads(k + t * kvd, c.n_kv_heads, layer.k_norm);
      const float* table = (layer.sliding_rope ? rope_sliding : rope) + t * half * 2;
      apply_rope(q + t * qd, c.n_heads, table);
      apply_rope(k + t * kvd, c.n_kv_heads, table);
      if (c.scale_queries) {
        const float s = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
        for (size_t i = 0; i < qd; ++i) q[t * qd + i] *= s;
      }
    });
    PagedAttentionBatch attention = batch.attention;
    std::span<const int64_t> slots = batch.slot_mapping;
    if (layer.group > 0) {
      const KVGroupTables& g = batch.extra_groups[sz(layer.group - 1)];
      attention.block_tables = g.block_tables;
      attention.block_table_stride = g.block_table_stride;
      slots = g.slot_mapping;
    }
    const KVLayerView view = kv.layer(layer.arena_layer);
    write_kv(view, k, v, slots.data(), num_tokens);
    paged_attention(layer.attention, attention, view, q, att, isa_);
    layer.wo.multiply(att, qd, num_tokens, proj, d, isa_);
    if (layer.post_attn_norm) rmsnorm_rows(proj, layer.post_attn_norm, num_tokens, proj);
    add_rows(x, proj, t_count, d);

    // Feed-forward block: x += down(act(gate xb) * (up xb)), or the experts' mixture of it.
    rmsnorm_rows(x, layer.ffn_norm, num_tokens, xb);
    if (c.is_moe()) {
      moe_ffn(layer, xb, num_tokens, proj);
      add_rows(x, proj, t_count, d);
      continue;
    }
    layer.gate_up.multiply(xb, d, num_tokens, gate_up, 2 * h, isa_);
    for_each_token(t_count, t_count * h, [&](size_t t) {
      const float* g = gate_up + t * 2 * h;
      const float* u = g + h;
      float* out = hidden + t * h;
      if (c.activation == FeedForwardActivation::kGeluTanh) {
        for (size_t i = 0; i < h; ++i) out[i] = gelu_ggml(g[i]) * u[i];
      } else {
        silu_gate(g, u, out, h, isa_);
      }
    });
    layer.down.multiply(hidden, h, num_tokens, proj, d, isa_);
    if (layer.post_ffn_norm) rmsnorm_rows(proj, layer.post_ffn_norm, num_tokens, proj);
    add_rows(x, proj, t_count, d);
  }

  // Final norm and classifier, only for the rows that sample.
  const size_t rows = batch.logits_rows.size();
  Logits out;
  out.num_rows = static_cast<int>(rows);
  out.vocab_size = c.vocab_size;
  if (rows == 0) {
    out.data = grow(logits_, 1);
    return out;
  }
  float* gathered = grow(final_, rows * d);
  for (size_t r = 0; r < rows; ++r) {
    const float* src = x + sz(batch.logits_rows[r]) * d;
    std::copy(src, src + d, gathered + r * d);
  }
  rmsnorm_rows(gathered, output_norm_, static_cast<int>(rows), gathered);
  float* logits = grow(logits_, rows * sz(c.vocab_size));
  output_.multiply(gathered, d, static_cast<int>(rows), logits, sz(c.vocab_size), isa_);
  if (c.final_logit_softcap > 0) {
    const float cap = c.final_logit_softcap, inv = 1.0f / cap;
    for (size_t i = 0; i < rows * sz(c.vocab_size); ++i) logits[i] = std::tanh(logits[i] * inv) * cap;
  }
  out.data = logits;
  return out;
}

}  // namespace pagedkv
