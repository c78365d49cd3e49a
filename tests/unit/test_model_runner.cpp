// End-to-end: ModelRunner on the real stories260K weights reproduces llama2.c's golden outputs
// byte for byte, through a paged KV cache, alone or batched, at several block sizes and with
// chunked prefill; plus checks against a plain run.c-style reference forward on random models.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/random_model.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

using testing::Golden;
using testing::Sequence;

struct Stories {
  Llama2cCheckpoint model;
  Tokenizer tokenizer;
  explicit Stories(const std::filesystem::path& dir)
      : model((dir / "stories260K.bin").string()),
        tokenizer((dir / "tok512.bin").string(), model.config().vocab_size) {}
};

Sequence make_sequence(const Tokenizer& tok, const Golden& g) {
  Sequence s;
  s.prompt = tok.encode(g.prompt);
  s.steps = g.steps;
  return s;
}

// Checks one finished sequence against golden/<name>.{ids,txt}.
void expect_golden(const std::filesystem::path& dir, const Tokenizer& tok, const Golden& g, const Sequence& s,
                   const std::string& context) {
  const auto want_ids = testing::read_ids(dir / "golden" / (g.name + ".ids"));
  const auto want_text = testing::read_text(dir / "golden" / (g.name + ".txt"));
  ASSERT_FALSE(want_ids.empty());
  EXPECT_EQ(s.ids, want_ids) << g.name << " " << context;
  std::vector<TokenId> printed = s.ids;
  if (printed.back() == Tokenizer::kBos) printed.pop_back();  // run.c stops without printing BOS
  EXPECT_EQ(tok.render(printed) + "\n", want_text) << g.name << " " << context;
}

// Enough blocks for every sequence at this block size, plus the null block.
int blocks_needed(const std::vector<Sequence>& seqs, int block_size) {
  int blocks = 1;
  for (const auto& s : seqs) blocks += (s.steps + block_size - 1) / block_size;
  return blocks;
}

class GoldenTest : public ::testing::TestWithParam<int> {};

TEST_P(GoldenTest, EachGoldenAloneMatchesByteForByte) {
  PAGEDKV_REQUIRE_MODELS(dir);
  testing::ScopedKernelThreads threads(1);
  Stories st(dir);
  ModelRunner runner(st.model);
  const int block_size = GetParam();
  for (const Golden& g : testing::goldens()) {
    std::vector<Sequence> seqs = {make_sequence(st.tokenizer, g)};
    KVArena arena(runner.kv_cache_spec(block_size), st.model.config().n_layers, blocks_needed(seqs, block_size));
    arena.fill_nan();  // a read of any slot not written this run poisons the logits
    testing::generate(runner, arena, seqs, /*max_chunk=*/1 << 20);
    expect_golden(dir, st.tokenizer, g, seqs[0], "alone, block size " + std::to_string(block_size));
  }
}

TEST_P(GoldenTest, AllGoldensInOneFlattenedBatchMatch) {
  PAGEDKV_REQUIRE_MODELS(dir);
  testing::ScopedKernelThreads threads(1);
  Stories st(dir);
  ModelRunner runner(st.model);
  const int block_size = GetParam();
  std::vector<Sequence> seqs;
  for (const Golden& g : testing::goldens()) seqs.push_back(make_sequence(st.tokenizer, g));
  KVArena arena(runner.kv_cache_spec(block_size), st.model.config().n_layers, blocks_needed(seqs, block_size));
  arena.fill_nan();
  testing::generate(runner, arena, seqs, 1 << 20);
  for (size_t i = 0; i < seqs.size(); ++i)
    expect_golden(dir, st.tokenizer, testing::goldens()[i], seqs[i],
                  "batched, block size " + std::to_string(block_size));
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, GoldenTest, ::testing::Values(1, 16, 64),
                         [](const auto& param_info) { return "block" + std::to_string(param_info.param); });

TEST(ModelRunnerGolden, ChunkedPrefillMatches) {
  PAGEDKV_REQUIRE_MODELS(dir);
  testing::ScopedKernelThreads threads(1);
  Stories st(dir);
  ModelRunner runner(st.model);
  // Chunks of 1 (token-by-token prefill, like run.c), 3 and 5 tokens, all goldens batched together
  // so prefill chunks of one request share steps with decodes of the others.
  for (int chunk : {1, 3, 5}) {
    std::vector<Sequence> seqs;
    for (const Golden& g : testing::goldens()) seqs.push_back(make_sequence(st.tokenizer, g));
    KVArena arena(runner.kv_cache_spec(16), st.model.config().n_layers, blocks_needed(seqs, 16));
    arena.fill_nan();
    testing::generate(runner, arena, seqs, chunk);
    for (size_t i = 0; i < seqs.size(); ++i)
      expect_golden(dir, st.tokenizer, testing::goldens()[i], seqs[i], "prefill chunk " + std::to_string(chunk));
  }
}

TEST(ModelRunnerGolden, TwoThreadsGiveTheSameTokens) {
  PAGEDKV_REQUIRE_MODELS(dir);
  // The parallel matmul and attention paths. Kept short: on a machine shared by concurrently
  // running tests, every OpenMP barrier can cost a scheduler time slice.
  testing::ScopedKernelThreads threads(2);
  Stories st(dir);
  ModelRunner runner(st.model);
  std::vector<Sequence> seqs;
  for (const Golden& g : testing::goldens()) {
    seqs.push_back(make_sequence(st.tokenizer, g));
    seqs.back().steps = 48;
  }
  KVArena arena(runner.kv_cache_spec(16), st.model.config().n_layers, blocks_needed(seqs, 16));
  arena.fill_nan();
  testing::generate(runner, arena, seqs, 1 << 20);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto want = testing::read_ids(dir / "golden" / (testing::goldens()[i].name + ".ids"));
    ASSERT_EQ(seqs[i].ids.size(), 49u);
    EXPECT_TRUE(std::equal(seqs[i].ids.begin(), seqs[i].ids.end(), want.begin())) << testing::goldens()[i].name;
  }
}

TEST(ForwardBatchBuilder, LaysOutRequestsLikeTheRunnerExpects) {
  ForwardBatchBuilder b(4);
  const std::vector<TokenId> a_tokens = {10, 11, 12}, b_tokens = {20};
  const std::vector<int32_t> a_blocks = {7, 3}, b_blocks = {5, 9, 2};
  EXPECT_EQ(b.add_request(a_tokens, 2, a_blocks, false), 0);  // positions 2..4, no logits
  EXPECT_EQ(b.add_request(b_tokens, 9, b_blocks, true), 1);  // decode at position 9
  const ForwardBatch fb = b.batch();
  EXPECT_EQ(std::vector<TokenId>(fb.token_ids.begin(), fb.token_ids.end()), (std::vector<TokenId>{10, 11, 12, 20}));
  EXPECT_EQ(std::vector<int32_t>(fb.positions.begin(), fb.positions.end()), (std::vector<int32_t>{2, 3, 4, 9}));
  EXPECT_EQ(std::vector<int64_t>(fb.slot_mapping.begin(), fb.slot_mapping.end()),
            (std::vector<int64_t>{7 * 4 + 2, 7 * 4 + 3, 3 * 4 + 0, 2 * 4 + 1}));
  EXPECT_EQ(std::vector<int32_t>(fb.logits_rows.begin(), fb.logits_rows.end()), (std::vector<int32_t>{3}));
  ASSERT_EQ(fb.attention.num_requests, 2);
  EXPECT_EQ(fb.attention.query_start[1], 3);
  EXPECT_EQ(fb.attention.query_start[2], 4);
  EXPECT_EQ(fb.attention.context_lens[0], 5);
  EXPECT_EQ(fb.attention.context_lens[1], 10);
  EXPECT_EQ(fb.attention.block_table_stride, 3);
  EXPECT_EQ(std::vector<int32_t>(fb.attention.block_tables, fb.attention.block_tables + 6),
            (std::vector<int32_t>{7, 3, 0, 5, 9, 2}));
  EXPECT_THROW(b.add_request(b_tokens, 12, b_blocks, true), UsageError);  // position 12 needs a 4th block
  EXPECT_THROW(b.add_request({}, 0, b_blocks, true), UsageError);
  b.clear();
  EXPECT_EQ(b.num_requests(), 0);
  EXPECT_EQ(b.num_tokens(), 0);
}

TEST(ModelRunnerGolden, BuilderDrivenBatchMatches) {
  PAGEDKV_REQUIRE_MODELS(dir);
  testing::ScopedKernelThreads threads(1);
  Stories st(dir);
  ModelRunner runner(st.model);
  // Block size 1: each request's blocks are its own run of ids, allocated up front.
  const int bs = 1;
  std::vector<Sequence> seqs;
  for (const Golden& g : testing::goldens()) seqs.push_back(make_sequence(st.tokenizer, g));
  KVArena arena(runner.kv_cache_spec(bs), st.model.config().n_layers, blocks_needed(seqs, bs));
  arena.fill_nan();
  int next_block = 1;
  for (auto& s : seqs) {
    s.ids = s.prompt;
    for (int i = 0; i < s.steps; ++i) s.blocks.push_back(next_block++);
  }
  ForwardBatchBuilder builder(bs);
  for (bool any = true; any;) {
    any = false;
    builder.clear();
    std::vector<Sequence*> sampling;
    for (auto& s : seqs) {
      if (s.done) continue;
      any = true;
      // Whole prompt in the first step, then one token per step.
      const int end = static_cast<int>(s.ids.size());
      const bool samples = end >= static_cast<int>(s.prompt.size());
      builder.add_request(std::span(s.ids).subspan(static_cast<size_t>(s.computed)), s.computed, s.blocks, samples);
      if (samples) sampling.push_back(&s);
      s.computed = end;
    }
    if (!any) break;
    const Logits out = runner.forward(builder.batch(), arena);
    for (size_t r = 0; r < sampling.size(); ++r) {
      Sequence& s = *sampling[r];
      const TokenId next = Sampler::argmax(out.row(static_cast<int>(r)));
      s.ids.push_back(next);
      if (next == Tokenizer::kBos || s.computed >= s.steps) s.done = true;
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i)
    expect_golden(dir, st.tokenizer, testing::goldens()[i], seqs[i], "builder, block size 1");
}

TEST(ModelRunnerGolden, HalfPrecisionKVCacheStaysCloseToF32) {
  PAGEDKV_REQUIRE_MODELS(dir);
  testing::ScopedKernelThreads threads(1);
  Stories st(dir);
  ModelRunner runner(st.model);
  const Golden g = testing::goldens()[0];
  std::vector<Sequence> ref = {make_sequence(st.tokenizer, g)};
  ref[0].steps = 64;
  KVArena f32(runner.kv_cache_spec(16, DType::kF32), st.model.config().n_layers, blocks_needed(ref, 16));
  testing::generate(runner, f32, ref, 1 << 20);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    std::vector<Sequence> seqs = {make_sequence(st.tokenizer, g)};
    seqs[0].steps = 64;
    KVArena arena(runner.kv_cache_spec(16, dt), st.model.config().n_layers, blocks_needed(seqs, 16));
    testing::generate(runner, arena, seqs, 1 << 20);
    // Rounding K/V may flip a near-tie late in a story; the opening must survive it.
    const size_t prefix = 24;
    ASSERT_GE(seqs[0].ids.size(), prefix);
    EXPECT_TRUE(std::equal(ref[0].ids.begin(), ref[0].ids.begin() + prefix, seqs[0].ids.begin()))
        << "KV dtype " << dtype_name(dt);
  }
}

// ---- random models against a plain run.c-style forward with a contiguous cache ---------------

// run.c's forward, written out naively: one token at a time, cache [layer][pos][kv_dim].
class ReferenceForward {
 public:
  explicit ReferenceForward(const Model& m) : m_(m), c_(m.config()) {
    cache_k_.assign(static_cast<size_t>(c_.n_layers) * c_.seq_len * c_.kv_dim(), 0.0f);
    cache_v_ = cache_k_;
  }
  std::vector<float> forward(TokenId token, int pos) {
    const auto& w = m_.weights();
    const int d = c_.dim, kv = c_.kv_dim(), hd = c_.head_dim(), h = c_.hidden_dim;
    std::vector<float> x(w.token_embedding + token * d, w.token_embedding + (token + 1) * d);
    std::vector<float> xb(d), q(d), k(kv), v(kv), att(static_cast<size_t>(pos + 1)), o(d), hb(h), hb2(h), tmp(d);
    for (int l = 0; l < c_.n_layers; ++l) {
      rmsnorm(xb.data(), x.data(), w.rms_att + l * d);
      matmul(q.data(), xb.data(), w.wq + static_cast<size_t>(l) * d * d, d, d);
      matmul(k.data(), xb.data(), w.wk + static_cast<size_t>(l) * kv * d, d, kv);
      matmul(v.data(), xb.data(), w.wv + static_cast<size_t>(l) * kv * d, d, kv);
      for (int i = 0; i < d; i += 2) {
        const float freq = 1.0f / std::pow(10000.0f, static_cast<float>(i % hd) / static_cast<float>(hd));
        const float val = static_cast<float>(pos) * freq, fcr = std::cos(val), fci = std::sin(val);
        for (int which = 0; which < (i < kv ? 2 : 1); ++which) {
          float* vec = which == 0 ? q.data() : k.data();
          const float v0 = vec[i], v1 = vec[i + 1];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      float* kc = cache_k_.data() + (static_cast<size_t>(l) * c_.seq_len + pos) * kv;
      float* vc = cache_v_.data() + (static_cast<size_t>(l) * c_.seq_len + pos) * kv;
      std::copy(k.begin(), k.end(), kc);
      std::copy(v.begin(), v.end(), vc);
      for (int head = 0; head < c_.n_heads; ++head) {
        const int kvh = head / c_.queries_per_kv_head();
        for (int t = 0; t <= pos; ++t) {
          const float* kt = cache_k_.data() + (static_cast<size_t>(l) * c_.seq_len + t) * kv + kvh * hd;
          float s = 0;
          for (int i = 0; i < hd; ++i) s += q[head * hd + i] * kt[i];
          att[t] = s / std::sqrt(static_cast<float>(hd));
        }
        const float mx = *std::max_element(att.begin(), att.end());
        float sum = 0;
        for (auto& a : att) sum += (a = std::exp(a - mx));
        for (auto& a : att) a /= sum;
        for (int i = 0; i < hd; ++i) o[head * hd + i] = 0;
        for (int t = 0; t <= pos; ++t) {
          const float* vt = cache_v_.data() + (static_cast<size_t>(l) * c_.seq_len + t) * kv + kvh * hd;
          for (int i = 0; i < hd; ++i) o[head * hd + i] += att[t] * vt[i];
        }
      }
      matmul(tmp.data(), o.data(), w.wo + static_cast<size_t>(l) * d * d, d, d);
      for (int i = 0; i < d; ++i) x[i] += tmp[i];
      rmsnorm(xb.data(), x.data(), w.rms_ffn + l * d);
      matmul(hb.data(), xb.data(), w.w1 + static_cast<size_t>(l) * h * d, d, h);
      matmul(hb2.data(), xb.data(), w.w3 + static_cast<size_t>(l) * h * d, d, h);
      for (int i = 0; i < h; ++i) hb[i] = hb[i] * (1.0f / (1.0f + std::exp(-hb[i]))) * hb2[i];
      matmul(tmp.data(), hb.data(), w.w2 + static_cast<size_t>(l) * d * h, h, d);
      for (int i = 0; i < d; ++i) x[i] += tmp[i];
    }
    rmsnorm(x.data(), x.data(), w.rms_final);
    std::vector<float> logits(c_.vocab_size);
    matmul(logits.data(), x.data(), w.wcls, d, c_.vocab_size);
    return logits;
  }

 private:
  void rmsnorm(float* o, const float* x, const float* w) const {
    float ss = 0;
    for (int j = 0; j < c_.dim; ++j) ss += x[j] * x[j];
    ss = 1.0f / std::sqrt(ss / static_cast<float>(c_.dim) + 1e-5f);
    for (int j = 0; j < c_.dim; ++j) o[j] = w[j] * (ss * x[j]);
  }
  static void matmul(float* out, const float* x, const float* w, int n, int d) {
    for (int i = 0; i < d; ++i) {
      float val = 0;
      for (int j = 0; j < n; ++j) val += w[static_cast<size_t>(i) * n + j] * x[j];
      out[i] = val;
    }
  }
  const Model& m_;
  ModelConfig c_;
  std::vector<float> cache_k_, cache_v_;
};

ModelConfig odd_config(bool shared) {
  ModelConfig c;
  c.dim = 48;
  c.hidden_dim = 100;  // not a multiple of the 8-row panels
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;  // 3 query heads per KV head
  c.vocab_size = 77;
  c.seq_len = 64;
  c.shared_classifier = shared;
  return c;
}

TEST(ModelRunnerRandom, MatchesReferenceForwardForPrefillAndBatchedDecode) {
  testing::ScopedKernelThreads threads(1);
  for (bool shared : {true, false}) {
    auto model = make_random_model(odd_config(shared), 99);
    const ModelConfig& c = model->config();
    ModelRunner runner(*model);
    // Two sequences: A prefills 10 tokens in one step then decodes; B starts later.
    std::vector<TokenId> a = {1, 5, 9, 40, 3, 76, 12, 12, 0, 33, 8, 19, 60, 2};
    std::vector<TokenId> b = {1, 70, 70, 4, 18, 25, 31};
    ReferenceForward ref_a(*model), ref_b(*model);
    std::vector<std::vector<float>> want_a, want_b;
    for (size_t p = 0; p < a.size(); ++p) want_a.push_back(ref_a.forward(a[p], static_cast<int>(p)));
    for (size_t p = 0; p < b.size(); ++p) want_b.push_back(ref_b.forward(b[p], static_cast<int>(p)));

    const int bs = 4;
    KVArena arena(runner.kv_cache_spec(bs), c.n_layers, 16);
    arena.fill_nan();
    const std::vector<int32_t> table_a = {3, 7, 1, 9}, table_b = {12, 2};
    std::vector<int32_t> tables(2 * 4, 0);
    std::copy(table_a.begin(), table_a.end(), tables.begin());
    std::copy(table_b.begin(), table_b.end(), tables.begin() + 4);
    auto slot = [&](const std::vector<int32_t>& t, int p) { return static_cast<int64_t>(t[p / bs]) * bs + p % bs; };

    // Step 1: A's first 10 tokens alone, logits for every row.
    {
      std::vector<int32_t> pos(10), rows(10), qs = {0, 10}, ctx = {10};
      std::vector<int64_t> slots(10);
      for (int p = 0; p < 10; ++p) pos[p] = rows[p] = p, slots[p] = slot(table_a, p);
      ForwardBatch fb{std::span(a).first(10), pos, slots, {1, qs.data(), ctx.data(), tables.data(), 4}, rows, {}};
      const Logits out = runner.forward(fb, arena);
      for (int p = 0; p < 10; ++p)
        for (int i = 0; i < c.vocab_size; ++i)
          ASSERT_NEAR(out.row(p)[i], want_a[p][i], 2e-4f) << "prefill position " << p << " logit " << i;
    }
    // Steps 2..: A decodes one token per step, B prefills 3 tokens then decodes, same batch.
    int pa = 10, pb = 0;
    while (pa < static_cast<int>(a.size()) && pb < static_cast<int>(b.size())) {
      const int nb = pb == 0 ? 3 : 1;
      std::vector<TokenId> toks = {a[pa]};
      std::vector<int32_t> pos = {pa};
      std::vector<int64_t> slots = {slot(table_a, pa)};
      for (int i = 0; i < nb; ++i) {
        toks.push_back(b[pb + i]);
        pos.push_back(pb + i);
        slots.push_back(slot(table_b, pb + i));
      }
      std::vector<int32_t> qs = {0, 1, 1 + nb}, ctx = {pa + 1, pb + nb}, rows = {nb, 0};  // B's last row first
      ForwardBatch fb{toks, pos, slots, {2, qs.data(), ctx.data(), tables.data(), 4}, rows, {}};
      const Logits out = runner.forward(fb, arena);
      ASSERT_EQ(out.num_rows, 2);
      for (int i = 0; i < c.vocab_size; ++i) {
        ASSERT_NEAR(out.row(1)[i], want_a[pa][i], 2e-4f) << "A at " << pa;
        ASSERT_NEAR(out.row(0)[i], want_b[pb + nb - 1][i], 2e-4f) << "B at " << pb + nb - 1;
      }
      pa += 1;
      pb += nb;
    }
  }
}

// A prompt large enough that the per-token work between the products (norms, RoPE, the gated
// activation, the residual adds) is spread over the threads: every logit as on one thread.
TEST(ModelRunnerRandom, PromptLogitsDoNotDependOnTheThreadCount) {
  ModelConfig c = odd_config(false);
  c.dim = 512;
  c.hidden_dim = 1040;
  c.n_layers = 2;
  c.n_heads = 8;
  c.seq_len = 160;
  auto model = make_random_model(c, 7);
  const int n = 130;  // 130 x 512 values: past the threshold of the token-parallel loops
  std::vector<TokenId> toks(n);
  std::vector<int32_t> pos(n), rows(n), qs = {0, n}, ctx = {n}, table(9);
  std::vector<int64_t> slots(n);
  for (int p = 0; p < n; ++p) toks[p] = (p * 37 + 5) % c.vocab_size, pos[p] = rows[p] = p, slots[p] = p;
  for (int b = 0; b < 9; ++b) table[b] = b;
  std::vector<std::vector<float>> logits;
  for (int threads : {1, 2}) {
    testing::ScopedKernelThreads scoped(threads);
    ModelRunner runner(*model);
    KVArena arena(runner.kv_cache_spec(16), c.n_layers, 9);
    ForwardBatch fb{toks, pos, slots, {1, qs.data(), ctx.data(), table.data(), 9}, rows, {}};
    const Logits out = runner.forward(fb, arena);
    logits.emplace_back(out.data, out.data + static_cast<size_t>(n) * c.vocab_size);
  }
  for (size_t i = 0; i < logits[0].size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(logits[0][i]), std::bit_cast<uint32_t>(logits[1][i])) << "logit " << i;
}

TEST(ModelRunnerRandom, RejectsInconsistentBatches) {
  testing::ScopedKernelThreads threads(1);
  auto model = make_random_model(odd_config(true), 1);
  ModelRunner runner(*model);
  KVArena arena(runner.kv_cache_spec(4), model->config().n_layers, 8);
  std::vector<TokenId> toks = {1, 2, 3};
  std::vector<int32_t> pos = {0, 1, 2}, qs = {0, 3}, ctx = {3}, table = {1, 0, 0, 0}, rows = {2};
  std::vector<int64_t> slots = {4, 5, 6};
  auto batch = [&] { return ForwardBatch{toks, pos, slots, {1, qs.data(), ctx.data(), table.data(), 4}, rows, {}}; };
  EXPECT_NO_THROW(runner.forward(batch(), arena));

  pos = {0, 2, 3};  // positions must end at the context length
  EXPECT_THROW(runner.forward(batch(), arena), UsageError);
  pos = {0, 1, 2};
  toks = {1, 2, 77};  // outside the vocabulary
  EXPECT_THROW(runner.forward(batch(), arena), UsageError);
  toks = {1, 2, 3};
  rows = {3};  // logits row outside the batch
  EXPECT_THROW(runner.forward(batch(), arena), UsageError);
  rows = {};
  EXPECT_EQ(runner.forward(batch(), arena).num_rows, 0);
  ctx = {65};  // beyond seq_len 64
  pos = {62, 63, 64};
  EXPECT_THROW(runner.forward(batch(), arena), UsageError);
  ctx = {3};
  pos = {0, 1, 2};
  slots = {4, 5};  // size mismatch
  EXPECT_THROW(runner.forward(batch(), arena), UsageError);
  slots = {4, 5, 6};
  KVArena wrong_layers(runner.kv_cache_spec(4), model->config().n_layers + 1, 8);
  EXPECT_THROW(runner.forward(batch(), wrong_layers), UsageError);
}

TEST(ModelRunnerRandom, RandomModelIsDeterministicPerSeed) {
  auto a = make_random_model(odd_config(false), 5);
  auto b = make_random_model(odd_config(false), 5);
  auto c = make_random_model(odd_config(false), 6);
  const size_t n = llama2c_body_floats(a->config());
  EXPECT_TRUE(std::equal(a->weights().token_embedding, a->weights().token_embedding + n, b->weights().token_embedding));
  EXPECT_FALSE(std::equal(a->weights().wq, a->weights().wq + 100, c->weights().wq));
  EXPECT_NE(a->weights().wcls, a->weights().token_embedding);
  EXPECT_THROW(make_random_model(ModelConfig{}, 1), ConfigError);
}

}  // namespace
}  // namespace pagedkv
