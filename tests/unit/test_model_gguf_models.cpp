// GGUF models against llama.cpp: the tiny random-weight llama / qwen2 / gemma2 files in F32, F16,
// Q8_0 and Q4_0 (../shared/models/gguf/ref: llama.cpp's greedy ids, top-8 logits per step, full
// logits of steps 0 and 1), and stories260Ktok512.gguf, whose greedy outputs must equal the
// llama2.c goldens byte for byte.
//
// Each reference run is replayed with the prompt as one batch (as llama.cpp ran it) and then
// llama.cpp's own greedy ids fed back one at a time, so every step's logits are compared even
// after a near-tie; our argmax must equal llama.cpp's wherever its top-1/top-2 gap is >= 0.005
// (unquantized files), and on every file wherever that gap exceeds twice the step's largest top-8
// logit difference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "pagedkv/core/error.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/sampler.h"
#include "pagedkv/storage/kv_arena.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

namespace fs = std::filesystem;

fs::path shared_models() {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  return fs::path(env ? env : "../shared") / "models";
}

#define REQUIRE_GGUF_DATA()                          \
  if (!fs::exists(shared_models() / "gguf" / "ref")) \
  GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models/gguf (llama.cpp references) is absent; skipping"

// One sequence through the runner, with its own blocks for each KV-cache group.
class SingleSequence {
 public:
  SingleSequence(const Model& model, int max_tokens, KernelIsa isa = KernelIsa::kAuto)
      : runner_(model, isa),
        blocks_per_group_((max_tokens + kBlock - 1) / kBlock),
        groups_(model.config().num_kv_cache_groups()),
        arena_(runner_.kv_cache_spec(kBlock), model.config().kv_arena_layers(), 1 + groups_ * blocks_per_group_) {
    tables_.resize(static_cast<size_t>(groups_));
    // Group g owns blocks g*n+1 .. g*n+n, in reverse order so that a table is not the identity.
    for (int g = 0; g < groups_; ++g)
      for (int b = 0; b < blocks_per_group_; ++b)
        tables_[static_cast<size_t>(g)].push_back(1 + g * blocks_per_group_ + (blocks_per_group_ - 1 - b));
  }

  // Runs `tokens` at the next positions; returns the logits after the last one.
  std::vector<float> feed(const std::vector<TokenId>& tokens) {
    const int n = static_cast<int>(tokens.size());
    std::vector<int32_t> positions, query_start{0, n}, context{pos_ + n}, rows{n - 1};
    std::vector<std::vector<int64_t>> slots(static_cast<size_t>(groups_));
    for (int i = 0; i < n; ++i) {
      const int p = pos_ + i;
      positions.push_back(p);
      for (int g = 0; g < groups_; ++g)
        slots[static_cast<size_t>(g)].push_back(
            static_cast<int64_t>(tables_[static_cast<size_t>(g)][static_cast<size_t>(p / kBlock)]) * kBlock +
            p % kBlock);
    }
    std::vector<KVGroupTables> extra;
    for (int g = 1; g < groups_; ++g)
      extra.push_back(
          KVGroupTables{tables_[static_cast<size_t>(g)].data(), blocks_per_group_, slots[static_cast<size_t>(g)]});
    ForwardBatch b;
    b.token_ids = tokens;
    b.positions = positions;
    b.slot_mapping = slots[0];
    b.attention.num_requests = 1;
    b.attention.query_start = query_start.data();
    b.attention.context_lens = context.data();
    b.attention.block_tables = tables_[0].data();
    b.attention.block_table_stride = blocks_per_group_;
    b.logits_rows = rows;
    b.extra_groups = extra;
    const Logits out = runner_.forward(b, arena_);
    pos_ += n;
    const auto row = out.row(0);
    return {row.begin(), row.end()};
  }

 private:
  static constexpr int kBlock = 16;
  ModelRunner runner_;
  int blocks_per_group_;
  int groups_;
  KVArena arena_;
  std::vector<std::vector<int32_t>> tables_;
  int pos_ = 0;
};

struct Comparison {
  double max_full = 0;  // full logit vectors, steps 0 and 1
  double max_top8 = 0;  // llama.cpp's top-8 ids at every step
  int steps = 0;
  int argmax_differs = 0;  // steps where our argmax is not llama.cpp's
  int argmax_differs_clear = 0;  // ... where llama.cpp's top-2 gap is >= clear_gap
  int exact_steps = 0;  // steps whose top-8 logits are all within 1e-4 of llama.cpp's
  // Steps where our argmax differs although llama.cpp's top-2 gap exceeds twice that step's
  // largest top-8 difference (so the difference alone cannot explain the flip): must be none.
  int argmax_differs_unexplained = 0;
};

Comparison compare_with_reference(const Model& model, const nlohmann::json& ref, KernelIsa isa = KernelIsa::kAuto,
                                  double clear_gap = 0.005) {
  const std::vector<TokenId> prompt = ref["prompt_ids"].get<std::vector<TokenId>>();
  const std::vector<TokenId> generated = ref["generated_ids"].get<std::vector<TokenId>>();
  SingleSequence seq(model, static_cast<int>(prompt.size() + generated.size()) + 1, isa);
  Comparison c;
  std::vector<float> logits = seq.feed(prompt);
  for (size_t k = 0; k < generated.size(); ++k) {
    const auto& step = ref["steps"][k];
    double step_top8 = 0;
    for (const auto& pair : step["top"])
      step_top8 =
          std::max(step_top8, std::fabs(static_cast<double>(logits[pair[0].get<size_t>()]) - pair[1].get<double>()));
    c.max_top8 = std::max(c.max_top8, step_top8);
    c.exact_steps += step_top8 <= 1e-4 ? 1 : 0;
    if (k < ref["full_logits"].size()) {
      const auto& full = ref["full_logits"][k];
      for (size_t i = 0; i < logits.size(); ++i)
        c.max_full = std::max(c.max_full, std::fabs(static_cast<double>(logits[i]) - full[i].get<double>()));
    }
    const double gap = step["top"][0][1].get<double>() - step["top"][1][1].get<double>();
    if (Sampler::argmax(logits) != generated[k]) {
      ++c.argmax_differs;
      if (gap >= clear_gap) ++c.argmax_differs_clear;
      if (gap > 2 * step_top8 + 1e-6) ++c.argmax_differs_unexplained;
    }
    ++c.steps;
    if (k + 1 < generated.size()) logits = seq.feed({generated[k]});
  }
  return c;
}

nlohmann::json load_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// F32 and F16 files: every logit within full_tol / top8_tol of llama.cpp's, and llama.cpp's greedy
// id wherever its top-2 gap is >= 0.005. Q8_0 / Q4_0 files (quantized: true): we quantize
// activations to Q8_0 as llama.cpp does, so a step matches llama.cpp to float rounding until a
// float difference upstream (summation order, exp) moves one activation across a Q8_0 rounding
// boundary; from there the logits differ by up to the tolerance (about what one quantization step
// of one activation is worth in these chaotic random models). The first steps of the 5-token
// prompt must match exactly (1e-4); the output reports how many steps of each run do.
struct Case {
  std::string model, type;
  double full_tol, top8_tol;
  bool quantized = false;
  // Quantized files whose first steps of the 5-token prompt match llama.cpp to float rounding in
  // every build. tiny-qwen2.q4_0 does in the AVX2 build (8-lane partial sums, llama.cpp's order:
  // 4e-8) but not in the scalar twin nor the AVX-512 build, which add the exact block sums in
  // block order: there one activation lands on the other side of a Q8_0 rounding boundary in
  // those steps (0.155), as the scalar twin always did.
  bool first_steps_exact = true;
  // Unquantized files: our argmax must be llama.cpp's wherever its top-2 gap is at least this.
  // small-phi3.f16 allows 0.035, twice its largest top-8 difference (0.017: llama.cpp rounds the
  // activations of F16 products to F16, we keep them f32).
  double clear_gap = 0.005;
};

class GgufReference : public ::testing::TestWithParam<Case> {};

TEST_P(GgufReference, LogitsAndGreedyIdsMatchLlamaCpp) {
  REQUIRE_GGUF_DATA();
  testing::ScopedKernelThreads threads(1);
  const Case& cs = GetParam();
  const fs::path dir = shared_models() / "gguf";
  GgufModel model((dir / (cs.model + "." + cs.type + ".gguf")).string());
  for (const char* prompt : {"p5_once_upon_a_time", "p40_no_prompt", "p150_tom_and_lily"}) {
    SCOPED_TRACE(prompt);
    const auto ref = load_json(dir / "ref" / (cs.model + "." + cs.type + "." + prompt + ".json"));
    const Comparison c = compare_with_reference(model, ref, KernelIsa::kAuto, cs.clear_gap);
    std::printf(
        "%s.%s %s: max |logit diff| full %.3g top-8 %.3g; %d of %d steps exact (1e-4); argmax differs at %d "
        "(%d with llama.cpp's gap >= %g)\n",
        cs.model.c_str(), cs.type.c_str(), prompt, c.max_full, c.max_top8, c.exact_steps, c.steps, c.argmax_differs,
        c.argmax_differs_clear, cs.clear_gap);
    EXPECT_LE(c.max_full, cs.full_tol);
    EXPECT_LE(c.max_top8, cs.top8_tol);
    EXPECT_EQ(c.argmax_differs_unexplained, 0) << "greedy ids differ where llama.cpp's top-2 gap allows no flip";
    if (!cs.quantized) {
      EXPECT_EQ(c.argmax_differs_clear, 0);
    }
    if (cs.quantized && cs.first_steps_exact && std::string(prompt) == "p5_once_upon_a_time") {
      EXPECT_LE(c.max_full, 1e-4) << "the first steps of a short prompt must match llama.cpp's Q8_0 arithmetic";
    }
  }
}

// A case's test name: "tiny_llama_q8_0".
std::string case_name(const ::testing::TestParamInfo<Case>& param_info) {
  std::string n = param_info.param.model + "_" + param_info.param.type;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, GgufReference,
    // F32: llama / qwen2 within 2e-4 (measured <= 6.3e-5), gemma2 within 2e-3 (measured <= 9.7e-4;
    // llama.cpp's own batch-vs-single noise there is 5e-4). F16 within 0.04 (measured <= 0.032;
    // llama.cpp rounds activations to F16, we keep them f32: its README reports 0.005-0.02).
    ::testing::Values(Case{"tiny-llama", "f32", 2e-4, 2e-4}, Case{"tiny-llama", "f16", 0.04, 0.04},
                      Case{"tiny-llama", "q8_0", 0.5, 0.5, true}, Case{"tiny-llama", "q4_0", 0.5, 0.5, true},
                      Case{"tiny-qwen2", "f32", 2e-4, 2e-4}, Case{"tiny-qwen2", "f16", 0.04, 0.04},
                      Case{"tiny-qwen2", "q8_0", 0.5, 0.5, true}, Case{"tiny-qwen2", "q4_0", 0.5, 0.5, true, false},
                      Case{"tiny-gemma2", "f32", 2e-3, 2e-3}, Case{"tiny-gemma2", "f16", 0.04, 0.04},
                      Case{"tiny-gemma2", "q8_0", 0.5, 0.5, true}, Case{"tiny-gemma2", "q4_0", 0.5, 0.5, true}),
    case_name);

// The small-llama files (every row a multiple of 256): llama.cpp's K-quant and IQ4 mixes, read tensor
// by tensor in each tensor's own type. Activations are quantized per weight type as ggml does (Q8_K
// for K-quants and IQ4_XS, Q8_0 for IQ4_NL), so the first steps match llama.cpp to float rounding;
// later steps differ by up to the 0.5 of the Q8_0 files once an activation rounds the other way
// (llama.cpp itself moves by up to 0.2 between its own kernel paths: its README, "internal noise").
// The Q5_K files' first steps of the 5-token prompt match to 6e-6 in the AVX2 and AVX-512 builds,
// but in the all-scalar runner (PAGEDKV_ISA=scalar) one activation rounds the other way (0.18).
INSTANTIATE_TEST_SUITE_P(
    SmallLlama, GgufReference,
    ::testing::Values(Case{"small-llama", "f32", 1e-3, 1e-3}, Case{"small-llama", "f16", 0.04, 0.04},
                      Case{"small-llama", "q8_0", 0.5, 0.5, true}, Case{"small-llama", "q2_k", 0.5, 0.5, true},
                      Case{"small-llama", "q3_k_m", 0.5, 0.5, true}, Case{"small-llama", "q4_k_m", 0.5, 0.5, true},
                      Case{"small-llama", "q5_k_m", 0.5, 0.5, true, false}, Case{"small-llama", "q6_k", 0.5, 0.5, true},
                      Case{"small-llama", "iq4_nl", 0.5, 0.5, true}, Case{"small-llama", "iq4_xs", 0.5, 0.5, true},
                      Case{"small-llama", "q4_k", 0.5, 0.5, true}, Case{"small-llama", "q5_k", 0.5, 0.5, true, false}),
    case_name);

// The other small families: qwen3 (per-head q/k RMSNorm, head_dim 64 != dim / heads, tied output),
// phi3 (fused attn_qkv and gate+up, q scaled before the product) and qwen3moe (8 experts, top 2
// renormalised), each in F32, F16 and llama.cpp's Q4_K_M mix. F16 within 0.04, or 0.08 for the
// qwen3 families (measured <= 0.054: their sharp q/k-norm attention amplifies llama.cpp's F16
// activation rounding, which its README measures at up to 0.035 against f32 activations).
INSTANTIATE_TEST_SUITE_P(
    SmallArchitectures, GgufReference,
    ::testing::Values(Case{"small-qwen3", "f32", 1e-3, 1e-3}, Case{"small-qwen3", "f16", 0.08, 0.08},
                      Case{"small-qwen3", "q4_k_m", 0.5, 0.5, true}, Case{"small-phi3", "f32", 1e-3, 1e-3},
                      Case{"small-phi3", "f16", 0.04, 0.04, false, true, 0.035},
                      Case{"small-phi3", "q4_k_m", 0.5, 0.5, true}, Case{"small-qwen3moe", "f32", 1e-3, 1e-3},
                      Case{"small-qwen3moe", "f16", 0.08, 0.08}, Case{"small-qwen3moe", "q4_k_m", 0.5, 0.5, true}),
    case_name);

// Two requests in one step through qwen3moe: the experts run once over both requests' tokens
// (grouped by expert), and each request's logits must be those of its run alone.
TEST(GgufSmallMoe, BatchedRequestsEqualTheirSingleRuns) {
  REQUIRE_GGUF_DATA();
  testing::ScopedKernelThreads threads(1);
  const fs::path dir = shared_models() / "gguf";
  for (const char* type : {"f32", "q4_k_m"}) {
    SCOPED_TRACE(type);
    GgufModel model((dir / (std::string("small-qwen3moe.") + type + ".gguf")).string());
    const auto a =
        load_json(dir / "ref" / (std::string("small-qwen3moe.") + type + ".p5_once_upon_a_time.json"))["prompt_ids"]
            .get<std::vector<TokenId>>();
    const auto b =
        load_json(dir / "ref" / (std::string("small-qwen3moe.") + type + ".p40_no_prompt.json"))["prompt_ids"]
            .get<std::vector<TokenId>>();
    SingleSequence sa(model, static_cast<int>(a.size())), sb(model, static_cast<int>(b.size()));
    const std::vector<float> alone_a = sa.feed(a), alone_b = sb.feed(b);

    constexpr int kBlock = 16, kStride = 4;  // request r owns blocks 1 + r*4 .. 4 + r*4
    ModelRunner runner(model);
    KVArena arena(runner.kv_cache_spec(kBlock), model.config().kv_arena_layers(), 1 + 2 * kStride);
    const int na = static_cast<int>(a.size()), nb = static_cast<int>(b.size());
    std::vector<TokenId> ids = a;
    ids.insert(ids.end(), b.begin(), b.end());
    std::vector<int32_t> positions, tables(2 * kStride), query_start{0, na, na + nb}, context{na, nb},
        rows{na - 1, na + nb - 1};
    std::vector<int64_t> slots;
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < kStride; ++k) tables[static_cast<size_t>(r * kStride + k)] = 1 + r * kStride + k;
    for (int i = 0; i < na + nb; ++i) {
      const int r = i < na ? 0 : 1, p = i < na ? i : i - na;
      positions.push_back(p);
      slots.push_back(static_cast<int64_t>(tables[static_cast<size_t>(r * kStride + p / kBlock)]) * kBlock +
                      p % kBlock);
    }
    ForwardBatch batch;
    batch.token_ids = ids;
    batch.positions = positions;
    batch.slot_mapping = slots;
    batch.attention.num_requests = 2;
    batch.attention.query_start = query_start.data();
    batch.attention.context_lens = context.data();
    batch.attention.block_tables = tables.data();
    batch.attention.block_table_stride = kStride;
    batch.logits_rows = rows;
    const Logits out = runner.forward(batch, arena);
    double max_diff = 0;
    for (size_t i = 0; i < alone_a.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(out.row(0)[i]) - alone_a[i]));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(out.row(1)[i]) - alone_b[i]));
    }
    EXPECT_LE(max_diff, 1e-5);
  }
}

// stories260Ktok512.gguf holds stories260K.bin's weights: its greedy runs must reproduce the three
// llama2.c goldens byte for byte (ids; the text is the llama2.c path's business), and llama.cpp's
// logits along them.
TEST(GgufStories, GreedyRunsEqualTheLlama2cGoldens) {
  const fs::path gguf = shared_models() / "stories260Ktok512.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << gguf << " is absent; skipping";
  testing::ScopedKernelThreads threads(1);
  GgufModel model(gguf.string(), /*context_length=*/512);  // the file says 128; run.c runs 512
  EXPECT_EQ(model.config().dim, 64);
  EXPECT_EQ(model.config().n_kv_heads, 4);
  EXPECT_EQ(model.config().seq_len, 512);
  const struct {
    const char* golden;
    const char* ref;
    int steps;
  } runs[] = {{"once_upon_a_time.n200", "once_upon_a_time.n200", 200},
              {"no_prompt.n256", "no_prompt.n256", 256},
              {"tom_and_lily.n256", "tom_and_lily.n256", 256}};
  for (const auto& run : runs) {
    SCOPED_TRACE(run.golden);
    std::ifstream in(shared_models() / "golden" / (std::string(run.golden) + ".ids"));
    std::vector<TokenId> golden;
    for (TokenId id; in >> id;) golden.push_back(id);
    ASSERT_FALSE(golden.empty());
    const auto ref =
        load_json(shared_models() / "gguf" / "ref" / (std::string("stories260Ktok512.") + run.ref + ".json"));
    const auto prompt = ref["prompt_ids"].get<std::vector<TokenId>>();
    // run.c semantics: forwards at positions 0..steps-1, prompt forced, argmax after, stop on BOS.
    SingleSequence seq(model, run.steps + 1);
    std::vector<TokenId> ids = prompt;
    std::vector<float> logits = seq.feed(prompt);
    double max_top8 = 0;
    for (int pos = static_cast<int>(prompt.size()) - 1; pos < run.steps; ++pos) {
      const size_t k = static_cast<size_t>(pos + 1) - prompt.size();
      if (k < ref["steps"].size())
        for (const auto& pair : ref["steps"][k]["top"])
          max_top8 =
              std::max(max_top8, std::fabs(static_cast<double>(logits[pair[0].get<size_t>()]) - pair[1].get<double>()));
      const TokenId next = Sampler::argmax(logits);
      ids.push_back(next);
      if (next == 1 || pos + 1 == run.steps) break;
      logits = seq.feed({next});
    }
    EXPECT_EQ(ids, golden);
    std::printf("stories260Ktok512.gguf %s: ids equal the golden: %s; max |top-8 logit diff| vs llama.cpp %.3g\n",
                run.golden, ids == golden ? "yes" : "no", max_top8);
    EXPECT_LE(max_top8, 1e-4);
  }
}

}  // namespace
}  // namespace pagedkv
