// gemma3 from its definition: a tiny random-weight gemma3 GGUF written here with the project's
// GGUF writer (there is no llama.cpp reference file for it) is loaded with the expected
// hyper-parameters (qk-norm, sliding pattern 6, two RoPE bases, linear scaling of the global
// layers), and served by LLMEngine (two KV-cache groups, small blocks) it gives the greedy tokens
// of a naive single-sequence forward written below from the architecture's definition. The
// naive forward with any one gemma3 feature left out (qk-norm, the sliding layers' RoPE base, the
// global layers' scaling, the window) disagrees, so each feature is exercised.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/storage/float_convert.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

constexpr int kDim = 64, kLayers = 7, kHeads = 4, kKvHeads = 2, kHeadDim = 32, kHidden = 96, kVocab = 64, kWindow = 8;
constexpr float kEps = 1e-6f, kThetaGlobal = 1e6f, kThetaLocal = 1e4f, kScale = 8.0f;

using Matrix = std::vector<float>;  // [rows][cols], row-major

struct Weights {
  Matrix embd;  // [vocab][dim]
  Matrix out_norm;
  struct Layer {
    Matrix attn_norm, q, k, v, o, q_norm, k_norm, post_attn_norm, ffn_norm, gate, up, down, post_ffw_norm;
  };
  std::vector<Layer> layers;
};

using testing::naive_matvec;
using testing::normal_values;

Weights make_weights() {
  std::mt19937 rng(3);
  Weights w;
  // Scales as in ../shared/models/gguf's tiny-gemma2 (small embeddings, strong final norm), so
  // that greedy outputs vary instead of repeating one token.
  w.embd = normal_values(rng, kVocab * kDim, 0.02f);
  w.out_norm = normal_values(rng, kDim, 0.3f, 20.0f);
  const size_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    Weights::Layer L;
    L.attn_norm = normal_values(rng, kDim, 0.3f, 1.0f);
    L.q = normal_values(rng, q * kDim, 0.3f);
    L.k = normal_values(rng, kv * kDim, 0.3f);
    L.v = normal_values(rng, kv * kDim, 0.3f);
    L.o = normal_values(rng, kDim * q, 0.3f);
    L.q_norm = normal_values(rng, kHeadDim, 0.3f, 1.0f);
    L.k_norm = normal_values(rng, kHeadDim, 0.3f, 1.0f);
    L.post_attn_norm = normal_values(rng, kDim, 0.3f, 1.0f);
    L.ffn_norm = normal_values(rng, kDim, 0.3f, 1.0f);
    L.gate = normal_values(rng, kHidden * kDim, 0.3f);
    L.up = normal_values(rng, kHidden * kDim, 0.3f);
    L.down = normal_values(rng, kDim * kHidden, 0.3f);
    L.post_ffw_norm = normal_values(rng, kDim, 0.3f, 1.0f);
    w.layers.push_back(std::move(L));
  }
  return w;
}

std::vector<std::byte> write_gguf(const Weights& w) {
  GgufWriter g;
  g.add_string("general.architecture", "gemma3");
  g.add_u32("gemma3.context_length", 128);
  g.add_u32("gemma3.embedding_length", kDim);
  g.add_u32("gemma3.block_count", kLayers);
  g.add_u32("gemma3.feed_forward_length", kHidden);
  g.add_u32("gemma3.attention.head_count", kHeads);
  g.add_u32("gemma3.attention.head_count_kv", kKvHeads);
  g.add_u32("gemma3.attention.key_length", kHeadDim);
  g.add_u32("gemma3.attention.value_length", kHeadDim);
  g.add_f32("gemma3.attention.layer_norm_rms_epsilon", kEps);
  g.add_u32("gemma3.attention.sliding_window", kWindow);
  g.add_f32("gemma3.rope.freq_base", kThetaGlobal);
  g.add_string("gemma3.rope.scaling.type", "linear");
  g.add_f32("gemma3.rope.scaling.factor", kScale);
  auto mat = [&](const std::string& name, const Matrix& m, int64_t cols, int64_t rows) {
    g.add_tensor_f32(name, TensorType::kF32, {cols, rows}, m);
  };
  auto vec = [&](const std::string& name, const Matrix& m) {
    g.add_tensor_f32(name, TensorType::kF32, {static_cast<int64_t>(m.size())}, m);
  };
  mat("token_embd.weight", w.embd, kDim, kVocab);
  vec("output_norm.weight", w.out_norm);
  const int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    const auto& L = w.layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", L.attn_norm);
    mat(b + "attn_q.weight", L.q, kDim, q);
    mat(b + "attn_k.weight", L.k, kDim, kv);
    mat(b + "attn_v.weight", L.v, kDim, kv);
    mat(b + "attn_output.weight", L.o, q, kDim);
    vec(b + "attn_q_norm.weight", L.q_norm);
    vec(b + "attn_k_norm.weight", L.k_norm);
    vec(b + "post_attention_norm.weight", L.post_attn_norm);
    vec(b + "ffn_norm.weight", L.ffn_norm);
    mat(b + "ffn_gate.weight", L.gate, kDim, kHidden);
    mat(b + "ffn_up.weight", L.up, kDim, kHidden);
    mat(b + "ffn_down.weight", L.down, kHidden, kDim);
    vec(b + "post_ffw_norm.weight", L.post_ffw_norm);
  }
  return g.bytes();
}

// ---- the naive forward, from the definition ----------------------------------------------------

struct Variant {
  bool qk_norm = true, local_base = true, global_scale = true, window = true;
};

std::vector<float> rmsnorm(const float* x, size_t n, const Matrix& w) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float s = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + kEps);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * s);
  return out;
}

// GELU, tanh form, as ggml evaluates it (inputs and results rounded to fp16).
float gelu(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float h = f16_to_f32(f32_to_f16(x));
  const float g = 0.5f * h * (1.0f + std::tanh(0.7978845608f * h * (1.0f + 0.044715f * h * h)));
  return f16_to_f32(f32_to_f16(g));
}

bool sliding(int layer) { return layer % 6 < 5; }

// NeoX RoPE on one head: pairs (i, i + d/2).
void rope(float* head, int pos, float theta, float scale) {
  const int half = kHeadDim / 2;
  for (int i = 0; i < half; ++i) {
    const float freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / kHeadDim) / scale;
    const float a = static_cast<float>(pos) * freq, c = std::cos(a), s = std::sin(a);
    const float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x0 * s + x1 * c;
  }
}

// Logits after the last of `tokens` (all positions recomputed).
std::vector<float> naive_logits(const Weights& w, const std::vector<TokenId>& tokens, Variant v) {
  const size_t n = tokens.size(), q_dim = kHeads * kHeadDim, kv_dim = kKvHeads * kHeadDim;
  std::vector<std::vector<float>> x(n);
  for (size_t t = 0; t < n; ++t) {
    x[t].assign(w.embd.begin() + static_cast<long>(tokens[t]) * kDim,
                w.embd.begin() + (static_cast<long>(tokens[t]) + 1) * kDim);
    for (float& e : x[t]) e *= std::sqrt(static_cast<float>(kDim));
  }
  for (int l = 0; l < kLayers; ++l) {
    const auto& L = w.layers[static_cast<size_t>(l)];
    const bool slides = sliding(l);
    const float theta = slides && v.local_base ? kThetaLocal : kThetaGlobal;
    const float scale = !slides && v.global_scale ? kScale : 1.0f;
    std::vector<std::vector<float>> q(n), k(n), val(n);
    for (size_t t = 0; t < n; ++t) {
      const auto h = rmsnorm(x[t].data(), kDim, L.attn_norm);
      q[t] = naive_matvec(L.q, h, 0, q_dim);
      k[t] = naive_matvec(L.k, h, 0, kv_dim);
      val[t] = naive_matvec(L.v, h, 0, kv_dim);
      for (int hd = 0; hd < kHeads; ++hd) {
        float* head = q[t].data() + hd * kHeadDim;
        if (v.qk_norm) std::copy_n(rmsnorm(head, kHeadDim, L.q_norm).begin(), kHeadDim, head);
        rope(head, static_cast<int>(t), theta, scale);
      }
      for (int hd = 0; hd < kKvHeads; ++hd) {
        float* head = k[t].data() + hd * kHeadDim;
        if (v.qk_norm) std::copy_n(rmsnorm(head, kHeadDim, L.k_norm).begin(), kHeadDim, head);
        rope(head, static_cast<int>(t), theta, scale);
      }
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<float> att(q_dim, 0.0f);
      for (int hd = 0; hd < kHeads; ++hd) {
        const int kvh = hd / (kHeads / kKvHeads);
        const size_t first = slides && v.window && t + 1 > kWindow ? t + 1 - kWindow : 0;
        std::vector<double> s;
        for (size_t j = first; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < kHeadDim; ++i)
            dot += static_cast<double>(q[t][hd * kHeadDim + i]) * k[j][kvh * kHeadDim + i];
          s.push_back(dot / std::sqrt(static_cast<double>(kHeadDim)));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = first; j <= t; ++j)
          for (int i = 0; i < kHeadDim; ++i)
            att[hd * kHeadDim + i] += static_cast<float>(s[j - first] / sum) * val[j][kvh * kHeadDim + i];
      }
      auto o = naive_matvec(L.o, att, 0, kDim);
      o = rmsnorm(o.data(), kDim, L.post_attn_norm);
      for (int i = 0; i < kDim; ++i) x[t][i] += o[i];
      const auto h = rmsnorm(x[t].data(), kDim, L.ffn_norm);
      const auto g = naive_matvec(L.gate, h, 0, kHidden), u = naive_matvec(L.up, h, 0, kHidden);
      std::vector<float> act(kHidden);
      for (int i = 0; i < kHidden; ++i) act[i] = gelu(g[i]) * u[i];
      auto d = naive_matvec(L.down, act, 0, kDim);
      d = rmsnorm(d.data(), kDim, L.post_ffw_norm);
      for (int i = 0; i < kDim; ++i) x[t][i] += d[i];
    }
  }
  const auto h = rmsnorm(x[n - 1].data(), kDim, w.out_norm);
  return naive_matvec(w.embd, h, 0, kVocab);  // tied output, no soft-cap
}

// Greedy continuation of `prompt` by the naive forward; stops early (returning what it has) at
// a step whose top-2 logit gap is below `min_gap`, where float rounding may pick either.
std::vector<TokenId> naive_greedy(const Weights& w, std::vector<TokenId> tokens, int steps, Variant v, float min_gap) {
  std::vector<TokenId> out;
  for (int s = 0; s < steps; ++s) {
    const auto logits = naive_logits(w, tokens, v);
    std::vector<int> order(kVocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
    if (logits[order[0]] - logits[order[1]] < min_gap) break;
    out.push_back(order[0]);
    tokens.push_back(order[0]);
  }
  return out;
}

TEST(Gemma3, LoadsItsHyperParameters) {
  const auto bytes = write_gguf(make_weights());
  GgufModel model(std::make_unique<GgufFile>(bytes, "tiny-gemma3.gguf"));
  const ModelConfig& c = model.config();
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.post_norms);
  EXPECT_EQ(c.head_dim(), kHeadDim);
  EXPECT_FLOAT_EQ(c.rope_theta, kThetaGlobal);
  EXPECT_FLOAT_EQ(c.rope_theta_sliding, kThetaLocal);
  EXPECT_FLOAT_EQ(c.rope_scale_full, kScale);
  EXPECT_EQ(c.attn_logit_softcap, 0.0f);
  EXPECT_EQ(c.final_logit_softcap, 0.0f);
  for (int l = 0; l < kLayers; ++l) EXPECT_EQ(c.is_sliding_layer(l), sliding(l)) << l;
  EXPECT_EQ(c.num_kv_cache_groups(), 7);  // one full layer, six sliding: groups of one layer (vLLM's rule)
  EXPECT_EQ(c.kv_arena_layers(), 1);
}

TEST(Gemma3, EngineMatchesTheNaiveForwardAndEveryFeatureMatters) {
  testing::ScopedKernelThreads threads(1);
  const Weights w = make_weights();
  const auto bytes = write_gguf(w);
  GgufModel model(std::make_unique<GgufFile>(bytes, "tiny-gemma3.gguf"));
  const std::vector<TokenId> prompt = {2, 17, 5, 40, 33, 9};
  constexpr int kSteps = 24;  // positions up to 29: far past the window of 8
  const auto expected = naive_greedy(w, prompt, kSteps, {}, 1e-3f);
  ASSERT_GE(expected.size(), 12u) << "the reference path has a near-tie too early to test much";
  EXPECT_GE(std::set<TokenId>(expected.begin(), expected.end()).size(), 4u) << "a degenerate reference";

  for (int block_size : {4, 16}) {
    EngineConfig cfg;
    cfg.block_size = block_size;
    cfg.num_blocks = 64;
    cfg.check_invariants = true;
    LLMEngine engine(model, cfg);
    EXPECT_EQ(engine.manager().num_groups(), 7);  // one full-attention group, six sliding ones of one layer
    GenerationRequest g;
    g.prompt = prompt;
    g.sampling.temperature = 0;
    g.stop.max_tokens = kSteps;
    engine.add_request(std::move(g));
    std::vector<TokenId> got;
    while (engine.has_unfinished())
      for (const RequestOutput& o : engine.step())
        if (o.finished) got = o.output;
    ASSERT_GE(got.size(), expected.size());
    EXPECT_EQ(std::vector<TokenId>(got.begin(), got.begin() + static_cast<long>(expected.size())), expected)
        << "block size " << block_size;
  }
  // Each feature changes the answer (otherwise the comparison above would not test it).
  for (Variant v : {Variant{false, true, true, true}, Variant{true, false, true, true},
                    Variant{true, true, false, true}, Variant{true, true, true, false}}) {
    EXPECT_NE(naive_greedy(w, prompt, kSteps, v, 0.0f), naive_greedy(w, prompt, kSteps, {}, 0.0f))
        << v.qk_norm << v.local_base << v.global_scale << v.window;
  }
}

}  // namespace
}  // namespace pagedkv
