// phi3 LongRoPE from its definition: a tiny random-weight phi3 GGUF written here with the
// project's GGUF writer carries rope_factors_long / rope_factors_short, an original context of
// 16 tokens, a context of 64 and an attention factor, and rotates only 12 of each head's 16 dims
// (Phi-4-mini's partial rotation). Its logits, fed as one prompt batch and then token by token
// past the original context, must equal a naive single-sequence forward written below, in which
// rotary pair i at position p turns by p * base^(-2i / n_rot) / factor_i with cos and sin times
// the attention factor. The factor set is the long one exactly when the model's context exceeds
// the original context (llama.cpp's choice, fixed at load), even at positions inside it. The
// naive forward with the other set, with no factors or with no attention factor disagrees, so
// each part is exercised; LLMEngine serves the file with the naive forward's greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "pagedkv/core/error.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/storage/kv_arena.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

constexpr int kDim = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kRot = 12, kHidden = 48, kVocab = 64;
constexpr int kContext = 64, kOriginal = 16;
constexpr float kEps = 1e-5f, kTheta = 10000.0f;
// The value llama.cpp's phi3 converter writes for LongRoPE: sqrt(1 + ln(ctx / orig) / ln(orig)).
const float kAttnFactor = static_cast<float>(std::sqrt(1.0 + std::log(4.0) / std::log(16.0)));

using Matrix = std::vector<float>;  // [rows][cols], row-major

struct Weights {
  Matrix embd, out_norm, long_factors, short_factors;
  struct Layer {
    Matrix attn_norm, qkv, o, ffn_norm, gate_up, down;
  };
  std::vector<Layer> layers;
};

using testing::naive_matvec;
using testing::normal_values;

Weights make_weights() {
  std::mt19937 rng(11);
  Weights w;
  w.embd = normal_values(rng, kVocab * kDim, 1.0f);
  w.out_norm = normal_values(rng, kDim, 0.3f, 3.0f);
  // Long factors stretch the low frequencies (as Phi-3's do, up to tens); short ones barely.
  for (int i = 0; i < kRot / 2; ++i) {
    w.long_factors.push_back(1.0f + 1.5f * static_cast<float>(i));
    w.short_factors.push_back(1.0f + 0.1f * static_cast<float>(i));
  }
  const size_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    Weights::Layer L;
    L.attn_norm = normal_values(rng, kDim, 0.1f, 1.0f);
    L.qkv = normal_values(rng, (q + 2 * kv) * kDim, 0.4f);
    L.o = normal_values(rng, kDim * q, 0.2f);
    L.ffn_norm = normal_values(rng, kDim, 0.1f, 1.0f);
    L.gate_up = normal_values(rng, 2 * kHidden * kDim, 0.2f);
    L.down = normal_values(rng, kDim * kHidden, 0.2f);
    w.layers.push_back(std::move(L));
  }
  return w;
}

struct FileOptions {
  bool original_key = true;  // rope.scaling.original_context_length present
  bool short_factors = true;
  float first_long_factor = 0;  // 0: the weights' own
};

std::vector<std::byte> write_gguf(const Weights& w, FileOptions o = {}) {
  GgufWriter g;
  g.add_string("general.architecture", "phi3");
  g.add_u32("phi3.context_length", kContext);
  if (o.original_key) g.add_u32("phi3.rope.scaling.original_context_length", kOriginal);
  g.add_f32("phi3.rope.scaling.attn_factor", kAttnFactor);
  g.add_u32("phi3.embedding_length", kDim);
  g.add_u32("phi3.block_count", kLayers);
  g.add_u32("phi3.feed_forward_length", kHidden);
  g.add_u32("phi3.attention.head_count", kHeads);
  g.add_u32("phi3.attention.head_count_kv", kKvHeads);
  g.add_u32("phi3.rope.dimension_count", kRot);
  g.add_f32("phi3.attention.layer_norm_rms_epsilon", kEps);
  g.add_f32("phi3.rope.freq_base", kTheta);
  auto mat = [&](const std::string& name, const Matrix& m, int64_t cols, int64_t rows) {
    g.add_tensor_f32(name, TensorType::kF32, {cols, rows}, m);
  };
  auto vec = [&](const std::string& name, const Matrix& m) {
    g.add_tensor_f32(name, TensorType::kF32, {static_cast<int64_t>(m.size())}, m);
  };
  mat("token_embd.weight", w.embd, kDim, kVocab);
  vec("output_norm.weight", w.out_norm);
  Matrix long_factors = w.long_factors;
  if (o.first_long_factor != 0) long_factors[0] = o.first_long_factor;
  vec("rope_factors_long.weight", long_factors);
  if (o.short_factors) vec("rope_factors_short.weight", w.short_factors);
  const int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    const auto& L = w.layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", L.attn_norm);
    mat(b + "attn_qkv.weight", L.qkv, kDim, q + 2 * kv);
    mat(b + "attn_output.weight", L.o, q, kDim);
    vec(b + "ffn_norm.weight", L.ffn_norm);
    mat(b + "ffn_up.weight", L.gate_up, kDim, 2 * kHidden);
    mat(b + "ffn_down.weight", L.down, kHidden, kDim);
  }
  return g.bytes();
}

// ---- the naive forward, from the definition ----------------------------------------------------

enum class Factors { kLong, kShort, kNone };
struct Variant {
  Factors factors = Factors::kLong;
  bool attn_factor = true;
};

std::vector<float> rmsnorm(const float* x, size_t n, const Matrix& w) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + kEps);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(w[i] * (x[i] * s));
  return out;
}

// NeoX RoPE on the first kRot dims of one head (pairs i, i + kRot/2), in double precision:
// angle pos * base^(-2i / kRot) / factor_i, cos and sin times the attention factor; dims
// kRot .. kHeadDim - 1 pass through unscaled.
void rope(float* head, int pos, const Weights& w, Variant v) {
  const int half = kRot / 2;
  const double m = v.attn_factor ? kAttnFactor : 1.0;
  for (int i = 0; i < half; ++i) {
    const double factor = v.factors == Factors::kLong    ? w.long_factors[static_cast<size_t>(i)]
                          : v.factors == Factors::kShort ? w.short_factors[static_cast<size_t>(i)]
                                                         : 1.0;
    const double a = pos * std::pow(static_cast<double>(kTheta), -2.0 * i / kRot) / factor;
    const double c = std::cos(a) * m, s = std::sin(a) * m;
    const double x0 = head[i], x1 = head[i + half];
    head[i] = static_cast<float>(x0 * c - x1 * s);
    head[i + half] = static_cast<float>(x0 * s + x1 * c);
  }
}

// Logits after the last of `tokens` (all positions recomputed).
std::vector<float> naive_logits(const Weights& w, const std::vector<TokenId>& tokens, Variant v) {
  const size_t n = tokens.size(), q_dim = kHeads * kHeadDim, kv_dim = kKvHeads * kHeadDim;
  std::vector<std::vector<float>> x(n);
  for (size_t t = 0; t < n; ++t)
    x[t].assign(w.embd.begin() + static_cast<long>(tokens[t]) * kDim,
                w.embd.begin() + (static_cast<long>(tokens[t]) + 1) * kDim);
  for (int l = 0; l < kLayers; ++l) {
    const auto& L = w.layers[static_cast<size_t>(l)];
    std::vector<std::vector<float>> q(n), k(n), val(n);
    for (size_t t = 0; t < n; ++t) {
      const auto h = rmsnorm(x[t].data(), kDim, L.attn_norm);
      q[t] = naive_matvec(L.qkv, h, 0, q_dim);
      k[t] = naive_matvec(L.qkv, h, q_dim, kv_dim);
      val[t] = naive_matvec(L.qkv, h, q_dim + kv_dim, kv_dim);
      for (int hd = 0; hd < kHeads; ++hd) rope(q[t].data() + hd * kHeadDim, static_cast<int>(t), w, v);
      for (int hd = 0; hd < kKvHeads; ++hd) rope(k[t].data() + hd * kHeadDim, static_cast<int>(t), w, v);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<float> att(q_dim, 0.0f);
      for (int hd = 0; hd < kHeads; ++hd) {
        const int kvh = hd / (kHeads / kKvHeads);
        std::vector<double> s;
        for (size_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < kHeadDim; ++i)
            dot += static_cast<double>(q[t][hd * kHeadDim + i]) * k[j][kvh * kHeadDim + i];
          s.push_back(dot / std::sqrt(static_cast<double>(kHeadDim)));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (int i = 0; i < kHeadDim; ++i)
            att[hd * kHeadDim + i] += static_cast<float>(s[j] / sum) * val[j][kvh * kHeadDim + i];
      }
      const auto o = naive_matvec(L.o, att, 0, kDim);
      for (int i = 0; i < kDim; ++i) x[t][i] += o[i];
      const auto h = rmsnorm(x[t].data(), kDim, L.ffn_norm);
      const auto g = naive_matvec(L.gate_up, h, 0, kHidden), u = naive_matvec(L.gate_up, h, kHidden, kHidden);
      std::vector<float> act(kHidden);
      for (int i = 0; i < kHidden; ++i) act[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      const auto d = naive_matvec(L.down, act, 0, kDim);
      for (int i = 0; i < kDim; ++i) x[t][i] += d[i];
    }
  }
  const auto h = rmsnorm(x[n - 1].data(), kDim, w.out_norm);
  return naive_matvec(w.embd, h, 0, kVocab);  // tied output
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// One sequence through the runner (phi3 has one KV-cache group); feed() returns the logits
// after the last token it was given.
class SingleSequence {
 public:
  SingleSequence(const Model& model, int max_tokens)
      : runner_(model, KernelIsa::kAuto),
        blocks_((max_tokens + kBlock - 1) / kBlock),
        arena_(runner_.kv_cache_spec(kBlock), model.config().kv_arena_layers(), 1 + blocks_) {
    for (int b = 0; b < blocks_; ++b) table_.push_back(blocks_ - b);  // reversed: not the identity
  }

  std::vector<float> feed(const std::vector<TokenId>& tokens) {
    const int n = static_cast<int>(tokens.size());
    std::vector<int32_t> positions, query_start{0, n}, context{pos_ + n}, rows{n - 1};
    std::vector<int64_t> slots;
    for (int p = pos_; p < pos_ + n; ++p) {
      positions.push_back(p);
      slots.push_back(static_cast<int64_t>(table_[static_cast<size_t>(p / kBlock)]) * kBlock + p % kBlock);
    }
    ForwardBatch b;
    b.token_ids = tokens;
    b.positions = positions;
    b.slot_mapping = slots;
    b.attention.num_requests = 1;
    b.attention.query_start = query_start.data();
    b.attention.context_lens = context.data();
    b.attention.block_tables = table_.data();
    b.attention.block_table_stride = blocks_;
    b.logits_rows = rows;
    const Logits out = runner_.forward(b, arena_);
    pos_ += n;
    const auto row = out.row(0);
    return {row.begin(), row.end()};
  }

 private:
  static constexpr int kBlock = 4;
  ModelRunner runner_;
  int blocks_;
  KVArena arena_;
  std::vector<int32_t> table_;
  int pos_ = 0;
};

std::vector<TokenId> sequence(size_t n) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<TokenId> d(0, kVocab - 1);
  std::vector<TokenId> s(n);
  for (TokenId& t : s) t = d(rng);
  return s;
}

std::string load_error(const std::vector<std::byte>& bytes) {
  try {
    GgufModel model(std::make_unique<GgufFile>(bytes, "tiny-phi3-longrope.gguf"));
    return "";
  } catch (const FormatError& e) {
    return e.what();
  }
}

TEST(LongRope, TheContextChoosesTheFactorSet) {
  const Weights w = make_weights();
  const auto bytes = write_gguf(w);
  struct Case {
    int context_length;  // 0: the file's (64)
    bool long_factors;
  };
  for (const Case cs : {Case{0, true}, Case{17, true}, Case{16, false}, Case{8, false}}) {
    GgufModel model(std::make_unique<GgufFile>(bytes, "tiny-phi3-longrope.gguf"), cs.context_length);
    const ModelConfig& c = model.config();
    EXPECT_EQ(c.rope_original_context, kOriginal);
    EXPECT_FLOAT_EQ(c.rope_attn_factor, kAttnFactor);
    EXPECT_EQ(c.rotary_dims(), kRot);
    EXPECT_EQ(c.uses_long_rope_factors(), cs.long_factors) << cs.context_length;
    ASSERT_TRUE(model.tensors().rope_freqs.present());
    const float* f = model.tensors().rope_freqs.f32();
    EXPECT_EQ(std::vector<float>(f, f + kRot / 2), cs.long_factors ? w.long_factors : w.short_factors);
    EXPECT_NE(c.describe().find(cs.long_factors ? "longrope=long" : "longrope=short"), std::string::npos)
        << c.describe();
  }
  // Without the original-context key the file's context length is the original (llama.cpp's
  // default): short factors at it, long ones only when the run asks for more.
  const auto no_key = write_gguf(w, {.original_key = false});
  EXPECT_FALSE(GgufModel(std::make_unique<GgufFile>(no_key, "a.gguf")).config().uses_long_rope_factors());
  EXPECT_TRUE(GgufModel(std::make_unique<GgufFile>(no_key, "a.gguf"), kContext + 1).config().uses_long_rope_factors());
  // Both sets are required and must be positive.
  EXPECT_NE(load_error(write_gguf(w, {.short_factors = false})).find("lacks the tensor 'rope_factors_short.weight'"),
            std::string::npos);
  EXPECT_NE(load_error(write_gguf(w, {.first_long_factor = -1})).find("'rope_factors_long.weight' holds -1"),
            std::string::npos);
}

TEST(LongRope, LogitsMatchTheNaiveForwardAndEveryPartMatters) {
  testing::ScopedKernelThreads threads(1);
  const Weights w = make_weights();
  const auto bytes = write_gguf(w);
  struct Case {
    int context_length;
    Factors expected;
    int tokens;
  };
  // 64: long factors, positions 0..39 (within and beyond the original 16); 16: short ones.
  for (const Case cs : {Case{kContext, Factors::kLong, 40}, Case{kOriginal, Factors::kShort, kOriginal}}) {
    GgufModel model(std::make_unique<GgufFile>(bytes, "tiny-phi3-longrope.gguf"), cs.context_length);
    const std::vector<TokenId> tokens = sequence(static_cast<size_t>(cs.tokens));
    constexpr size_t kPrompt = 5;
    SingleSequence seq(model, cs.tokens);
    std::vector<float> got = seq.feed({tokens.begin(), tokens.begin() + kPrompt});
    double worst = 0;
    // How far each wrong variant's logits stray at their farthest step.
    double other_set = 0, no_factors = 0, no_attn_factor = 0, other_set_inside = 0;
    const Factors other = cs.expected == Factors::kLong ? Factors::kShort : Factors::kLong;
    for (size_t n = kPrompt; n <= tokens.size(); ++n) {
      const std::vector<TokenId> prefix(tokens.begin(), tokens.begin() + static_cast<long>(n));
      const auto want = naive_logits(w, prefix, {cs.expected, true});
      worst = std::max(worst, max_abs_diff(got, want));
      const double d_other = max_abs_diff(naive_logits(w, prefix, {other, true}), want);
      other_set = std::max(other_set, d_other);
      if (n <= static_cast<size_t>(kOriginal)) other_set_inside = std::max(other_set_inside, d_other);
      no_factors = std::max(no_factors, max_abs_diff(naive_logits(w, prefix, {Factors::kNone, true}), want));
      no_attn_factor = std::max(no_attn_factor, max_abs_diff(naive_logits(w, prefix, {cs.expected, false}), want));
      if (n < tokens.size()) got = seq.feed({tokens[n]});
    }
    EXPECT_LT(worst, 2e-3) << "context " << cs.context_length;
    EXPECT_GT(other_set, 0.1) << "context " << cs.context_length;
    EXPECT_GT(other_set_inside, 0.1) << "the set is chosen by the context, not the position";
    EXPECT_GT(no_factors, 0.1) << "context " << cs.context_length;
    EXPECT_GT(no_attn_factor, 0.1) << "context " << cs.context_length;
  }
}

TEST(LongRope, EngineGeneratesTheNaiveGreedyTokensPastTheOriginalContext) {
  testing::ScopedKernelThreads threads(1);
  const Weights w = make_weights();
  const auto bytes = write_gguf(w);
  GgufModel model(std::make_unique<GgufFile>(bytes, "tiny-phi3-longrope.gguf"));
  const std::vector<TokenId> prompt = {3, 41, 7, 19, 60};
  constexpr int kSteps = 30;  // positions up to 34, past the original 16
  std::vector<TokenId> expected, tokens = prompt;
  for (int s = 0; s < kSteps; ++s) {
    const auto logits = naive_logits(w, tokens, {});
    std::vector<int> order(kVocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
    if (logits[order[0]] - logits[order[1]] < 1e-2f) break;  // a near-tie either side may take
    expected.push_back(order[0]);
    tokens.push_back(order[0]);
  }
  ASSERT_GE(expected.size(), 16u) << "the reference path has a near-tie too early to test much";
  EXPECT_GE(std::set<TokenId>(expected.begin(), expected.end()).size(), 4u) << "a degenerate reference";

  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.num_blocks = 32;
  cfg.check_invariants = true;
  LLMEngine engine(model, cfg);
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
  EXPECT_EQ(std::vector<TokenId>(got.begin(), got.begin() + static_cast<long>(expected.size())), expected);
}

}  // namespace
}  // namespace pagedkv
