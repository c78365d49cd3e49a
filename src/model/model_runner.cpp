#include "pagedkv/model/model_runner.h"

#include <cmath>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/kv_ops.h"

namespace pagedkv {

namespace {

size_t sz(int v) { return static_cast<size_t>(v); }

template <typename T>
T* grow(std::vector<T>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

ModelRunner::ModelRunner(const Model& model, KernelIsa isa) : config_(model.config()), isa_(resolve_isa(isa)) {
  config_.validate();
  const ModelConfig& c = config_;
  const ModelWeights& w = model.weights();
  const size_t d = sz(c.dim), h = sz(c.hidden_dim), kv = sz(c.kv_dim());
  token_embedding_ = w.token_embedding;
  rms_att_ = w.rms_att;
  rms_ffn_ = w.rms_ffn;
  rms_final_ = w.rms_final;
  for (size_t l = 0; l < sz(c.n_layers); ++l) {
    wqkv_.emplace_back(std::initializer_list<const float*>{w.wq + l * d * d, w.wk + l * kv * d, w.wv + l * kv * d},
                       std::initializer_list<int>{c.dim, c.kv_dim(), c.kv_dim()}, c.dim);
    wo_.emplace_back(w.wo + l * d * d, c.dim, c.dim);
    w13_.emplace_back(std::initializer_list<const float*>{w.w1 + l * h * d, w.w3 + l * h * d},
                      std::initializer_list<int>{c.hidden_dim, c.hidden_dim}, c.dim);
    w2_.emplace_back(w.w2 + l * d * h, c.dim, c.hidden_dim);
  }
  wcls_ = PackedMatrix(w.wcls, c.vocab_size, c.dim);

  // run.c: freq = 1.0f / powf(10000.0f, head_dim_index / (float)head_size) for even indices.
  const int hd = c.head_dim();
  for (int i = 0; i < hd; i += 2)
    rope_inv_freq_.push_back(1.0f / std::pow(ModelConfig::kRopeTheta, static_cast<float>(i) / static_cast<float>(hd)));

  attention_shape_.num_q_heads = c.n_heads;
  attention_shape_.num_kv_heads = c.n_kv_heads;
  attention_shape_.head_dim = hd;
  attention_shape_.scale = 1.0f / std::sqrt(static_cast<float>(hd));
}

size_t ModelRunner::packed_weight_bytes() const {
  size_t bytes = wcls_.bytes();
  for (size_t l = 0; l < wqkv_.size(); ++l)
    bytes += wqkv_[l].bytes() + wo_[l].bytes() + w13_[l].bytes() + w2_[l].bytes();
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

  if (kv.num_layers() != config_.n_layers || kv.spec().num_kv_heads != config_.n_kv_heads ||
      kv.spec().head_dim != config_.head_dim())
    throw UsageError(fmt::format("forward: the KV arena has {} layers of {} KV heads x {} dims, the model needs "
                                 "{} layers of {} x {}",
                                 kv.num_layers(), kv.spec().num_kv_heads, kv.spec().head_dim, config_.n_layers,
                                 config_.n_kv_heads, config_.head_dim()));

  for (size_t i = 0; i < t; ++i)
    if (b.token_ids[i] < 0 || b.token_ids[i] >= config_.vocab_size)
      throw UsageError(fmt::format("forward: token id {} at row {} is outside the vocabulary (0..{})", b.token_ids[i],
                                   i, config_.vocab_size - 1));

  const PagedAttentionBatch& a = b.attention;
  if (a.num_requests <= 0 || a.query_start == nullptr || a.context_lens == nullptr)
    throw UsageError("forward: the attention batch has no requests");
  if (a.query_start[0] != 0 || a.query_start[a.num_requests] != num_tokens)
    throw UsageError(fmt::format("forward: query_start must run from 0 to the token count {}, got {}..{}",
                                 num_tokens, a.query_start[0], a.query_start[a.num_requests]));
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
        throw UsageError(fmt::format("forward: row {} (request {}) has position {}, expected {} (context length {})",
                                     i, r, b.positions[sz(i)], first_position + (i - begin), a.context_lens[r]));
  }
  for (size_t i = 0; i < b.logits_rows.size(); ++i)
    if (b.logits_rows[i] < 0 || b.logits_rows[i] >= num_tokens)
      throw UsageError(fmt::format("forward: logits row {} is outside the batch (0..{})", b.logits_rows[i],
                                   num_tokens - 1));
}

// run.c rmsnorm, row by row: ss = sum x^2 (in order) / n + eps; out = w * (x / sqrt(ss)).
void ModelRunner::rmsnorm_rows(const float* x, const float* weight, int rows, float* out) const {
  const size_t d = sz(config_.dim);
  for (size_t r = 0; r < sz(rows); ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    float ss = 0.0f;
    for (size_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
    ss /= static_cast<float>(config_.dim);
    ss += ModelConfig::kRmsNormEps;
    ss = 1.0f / std::sqrt(ss);
    for (size_t j = 0; j < d; ++j) o[j] = weight[j] * (ss * xr[j]);
  }
}

Logits ModelRunner::forward(const ForwardBatch& batch, KVArena& kv) {
  validate(batch, kv);
  const ModelConfig& c = config_;
  const int num_tokens = static_cast<int>(batch.token_ids.size());
  const size_t t_count = sz(num_tokens);
  const size_t d = sz(c.dim), h = sz(c.hidden_dim), kvd = sz(c.kv_dim()), hd = sz(c.head_dim());
  const size_t qkv_width = d + 2 * kvd;
  const size_t half = hd / 2;

  float* x = grow(x_, t_count * d);
  float* xb = grow(xb_, t_count * d);
  float* qkv = grow(qkv_, t_count * qkv_width);
  float* q = grow(q_, t_count * d);
  float* k = grow(k_, t_count * kvd);
  float* v = grow(v_, t_count * kvd);
  float* att = grow(att_, t_count * d);
  float* proj = grow(proj_, t_count * d);
  float* gate_up = grow(gate_up_, t_count * 2 * h);
  float* hidden = grow(hidden_, t_count * h);
  float* rope = grow(rope_, t_count * half * 2);  // [T][head_dim/2] (cos, sin)

  for (size_t t = 0; t < t_count; ++t) {
    const float* row = token_embedding_ + sz(batch.token_ids[t]) * d;
    std::copy(row, row + d, x + t * d);
    // run.c: val = pos * freq; fcr = cosf(val); fci = sinf(val).
    const auto pos = static_cast<float>(batch.positions[t]);
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * rope_inv_freq_[i];
      rope[(t * half + i) * 2] = std::cos(angle);
      rope[(t * half + i) * 2 + 1] = std::sin(angle);
    }
  }

  for (int l = 0; l < c.n_layers; ++l) {
    const size_t layer = sz(l);
    // Attention block.
    rmsnorm_rows(x, rms_att_ + layer * d, num_tokens, xb);
    wqkv_[layer].multiply(xb, d, num_tokens, qkv, qkv_width, isa_);
    for (size_t t = 0; t < t_count; ++t) {
      const float* src = qkv + t * qkv_width;
      float* qt = q + t * d;
      float* kt = k + t * kvd;
      const float* cs = rope + t * half * 2;
      // RoPE on adjacent pairs (i, i+1) of every head, q everywhere and k for i < kv_dim.
      for (size_t i = 0; i < d; i += 2) {
        const float fcr = cs[(i % hd)], fci = cs[(i % hd) + 1];  // pair (i % hd) / 2, interleaved
        const float q0 = src[i], q1 = src[i + 1];
        qt[i] = q0 * fcr - q1 * fci;
        qt[i + 1] = q0 * fci + q1 * fcr;
        if (i < kvd) {
          const float k0 = src[d + i], k1 = src[d + i + 1];
          kt[i] = k0 * fcr - k1 * fci;
          kt[i + 1] = k0 * fci + k1 * fcr;
        }
      }
      std::copy(src + d + kvd, src + d + 2 * kvd, v + t * kvd);
    }
    const KVLayerView view = kv.layer(l);
    write_kv(view, k, v, batch.slot_mapping.data(), num_tokens);
    paged_attention(attention_shape_, batch.attention, view, q, att, isa_);
    wo_[layer].multiply(att, d, num_tokens, proj, d, isa_);
    for (size_t i = 0; i < t_count * d; ++i) x[i] += proj[i];

    // Feed-forward block: x += w2 (silu(w1 xb) * (w3 xb)).
    rmsnorm_rows(x, rms_ffn_ + layer * d, num_tokens, xb);
    w13_[layer].multiply(xb, d, num_tokens, gate_up, 2 * h, isa_);
    for (size_t t = 0; t < t_count; ++t) {
      const float* g = gate_up + t * 2 * h;
      const float* u = g + h;
      float* out = hidden + t * h;
      for (size_t i = 0; i < h; ++i) {
        const float val = g[i] * (1.0f / (1.0f + std::exp(-g[i])));
        out[i] = val * u[i];
      }
    }
    w2_[layer].multiply(hidden, h, num_tokens, proj, d, isa_);
    for (size_t i = 0; i < t_count * d; ++i) x[i] += proj[i];
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
  rmsnorm_rows(gathered, rms_final_, static_cast<int>(rows), gathered);
  float* logits = grow(logits_, rows * sz(c.vocab_size));
  wcls_.multiply(gathered, d, static_cast<int>(rows), logits, sz(c.vocab_size), isa_);
  out.data = logits;
  return out;
}

}  // namespace pagedkv
