// End to end: runs the built `pagedkv bench attention --quick --json` (ctest sets PAGEDKV_BIN)
// and checks the shape of its report. Timings are not checked: they are the benchmark's job.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <string>

#include "cli_test_support.h"

namespace {

std::string run(const std::string& command, int& exit_code) {
  const pagedkv::testing::CliResult r = pagedkv::testing::run_command(command);
  exit_code = r.exit_code;
  return r.output;
}

using BenchAttentionCli = pagedkv::testing::CliTest;

TEST_F(BenchAttentionCli, QuickJsonReportHasOneObjectPerCase) {
  int code = -1;
  const std::string out = run("'" + bin_ + "' bench attention --quick --json 2>/dev/null", code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_GT(j["read_bandwidth"]["gbps_median"].get<double>(), 0.0);
  const auto& cases = j["cases"];
  ASSERT_EQ(cases.size(), 4u);  // fp32 and fp16, context 512, batches 1 and 4
  for (const auto& c : cases) {
    for (const char* key : {"dtype", "context_len", "batch", "gbps", "fraction_of_bandwidth", "paged_over_contiguous"})
      EXPECT_TRUE(c.contains(key)) << key << " missing in " << c.dump();
    EXPECT_GT(c["gbps"].get<double>(), 0.0);
    EXPECT_GT(c["paged_over_contiguous"].get<double>(), 0.0);
    EXPECT_EQ(c["context_len"], 512);
    // The baseline is probed between the case's own rounds, and the fraction is a median of
    // per-round fractions: close to, but not exactly, gbps over the case's median bandwidth.
    const double bw = c["read_bandwidth_gbps"].get<double>();
    EXPECT_GT(bw, 0.0);
    EXPECT_GT(c["fraction_of_bandwidth"].get<double>(), 0.0);
    EXPECT_LT(c["fraction_of_bandwidth"].get<double>(), 100 * c["gbps"].get<double>() / bw);
  }
  EXPECT_EQ(cases[0]["dtype"], "fp32");
  EXPECT_EQ(cases[3]["dtype"], "fp16");
  EXPECT_EQ(cases[3]["batch"], 4);
}

TEST_F(BenchAttentionCli, TextReportAndSkippedCases) {
  int code = -1;
  const std::string out = run("'" + bin_ + "' bench attention --quick --dtypes bf16 --max-gib 0.001 2>&1", code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("read bandwidth"), std::string::npos) << out;
  EXPECT_NE(out.find("skipped"), std::string::npos) << out;  // 4 MiB per layer > 1 MiB allowed
  const std::string bad = run("'" + bin_ + "' bench attention --quick --dtypes int4 2>&1", code);
  EXPECT_EQ(code, 2) << bad;
  EXPECT_NE(bad.find("int4"), std::string::npos) << bad;
}

TEST_F(BenchAttentionCli, IsaOptionNamesThePathItRan) {
  int code = -1;
  // Every CPU runs the scalar path; the report says which path ran.
  const std::string out = run("'" + bin_ + "' bench attention --quick --json --isa scalar 2>/dev/null", code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  for (const auto& c : j["cases"]) EXPECT_EQ(c["isa"], "scalar") << c.dump();
  const std::string bad = run("'" + bin_ + "' bench attention --quick --isa avx1024 2>&1", code);
  EXPECT_EQ(code, 2) << bad;
  EXPECT_NE(bad.find("avx1024"), std::string::npos) << bad;
  EXPECT_NE(bad.find("avx512"), std::string::npos) << bad;  // the message lists the choices
}

// --shared-prefix: the requests' tables share their first blocks and the comparison is the same
// paged batch with cascade attention off; a prefix leaving no private suffix is refused.
TEST_F(BenchAttentionCli, SharedPrefixComparesCascadeOnAndOff) {
  int code = -1;
  const std::string out = run("'" + bin_ + "' bench attention --quick --json --shared-prefix 300 2>/dev/null", code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["cases"].size(), 4u);
  for (const auto& c : j["cases"]) {
    EXPECT_EQ(c["shared_prefix"], 288) << c.dump();  // whole blocks of 16
    EXPECT_EQ(c["cascade"], true) << c.dump();
    EXPECT_GT(c["cascade_off_ms"].get<double>(), 0.0) << c.dump();
    EXPECT_GT(c["cascade_over_off"].get<double>(), 0.0) << c.dump();
    EXPECT_FALSE(c.contains("paged_over_contiguous")) << c.dump();
  }
  const std::string off = run("'" + bin_ + "' bench attention --quick --shared-prefix 300 --no-cascade 2>&1", code);
  EXPECT_EQ(code, 0) << off;
  EXPECT_NE(off.find("cascade attention off (no comparison)"), std::string::npos) << off;
  const std::string bad = run("'" + bin_ + "' bench attention --quick --shared-prefix 512 2>&1", code);
  EXPECT_EQ(code, 2) << bad;
  EXPECT_NE(bad.find("no private suffix"), std::string::npos) << bad;
}

}  // namespace

namespace {

// The 8-bit formats through the same benchmark: each slot's bytes include the per-head scales.
TEST_F(BenchAttentionCli, Int8AndFp8CasesCountTheScales) {
  int code = -1;
  const std::string out = run("'" + bin_ + "' bench attention --quick --json --dtypes int8,fp8 2>/dev/null", code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["cases"].size(), 4u);
  for (const auto& c : j["cases"]) {
    const double tokens = c["batch"].get<double>() * c["context_len"].get<double>();
    EXPECT_EQ(c["kv_bytes_per_layer"].get<double>(), tokens * 2 * (8 * 128 + 8 * 4)) << c.dump();
    EXPECT_GT(c["gbps"].get<double>(), 0.0);
  }
}

// --heads and --head-dim set every case's shape: the bytes per token follow it (int8: the scales
// per KV head too), the report names it, and malformed shapes are usage errors naming the option.
TEST_F(BenchAttentionCli, HeadsAndHeadDimSetTheShape) {
  int code = -1;
  const std::string out = run(
      "'" + bin_ + "' bench attention --quick --json --dtypes fp16,int8 --heads 8/2 --head-dim 256 2>/dev/null", code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["cases"].size(), 4u);
  for (const auto& c : j["cases"]) {
    EXPECT_EQ(c["q_heads"], 8);
    EXPECT_EQ(c["kv_heads"], 2);
    EXPECT_EQ(c["head_dim"], 256);
    const double tokens = c["batch"].get<double>() * c["context_len"].get<double>();
    const double per_token = c["dtype"] == "fp16" ? 2 * 256 * 2 : 2 * 256 + 2 * 4;
    EXPECT_EQ(c["kv_bytes_per_layer"].get<double>(), tokens * 2 * per_token) << c.dump();
    EXPECT_GT(c["gbps"].get<double>(), 0.0);
  }
  for (const char* bad : {"--heads 8", "--heads 8/0", "--heads 12/8", "--heads x/2", "--head-dim 0"}) {
    const std::string err = run("'" + bin_ + "' bench attention --quick " + std::string(bad) + " 2>&1", code);
    EXPECT_EQ(code, 2) << bad << ": " << err;
    EXPECT_NE(err.find(std::string(bad).substr(0, 7)), std::string::npos) << err;
  }
}

// pagedkv bench kv-dtype on a few short sequences of stories260K: fp16 must be far closer to the
// f32 cache than int8, and int8 not identical to it (its KV really is quantized).
TEST_F(BenchAttentionCli, KVDtypeAccuracyReport) {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  if (shared == nullptr || !std::filesystem::exists(std::filesystem::path(shared) / "models" / "stories260K.bin"))
    GTEST_SKIP() << "stories260K not found";
  int code = -1;
  const std::string out = run("'" + bin_ +
                                  "' bench kv-dtype --skip-builtin --sequences 4 --batch 2 --length 64 "
                                  "--short-context 16 --kv-dtypes int8,fp16 --json 2>/dev/null",
                              code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json m = nlohmann::json::parse(out)["models"].at(0);
  ASSERT_EQ(m["teacher_forced"].size(), 2u);
  const auto& int8 = m["teacher_forced"][0];
  const auto& fp16 = m["teacher_forced"][1];
  EXPECT_EQ(int8["dtype"], "int8");
  EXPECT_EQ(int8["short"]["positions"], 4 * 16);
  EXPECT_EQ(int8["long"]["positions"], 4 * (63 - 16));
  for (const char* part : {"short", "long"}) {
    EXPECT_GT(int8[part]["kl_mean"].get<double>(), 0.0);
    EXPECT_LT(fp16[part]["kl_mean"].get<double>(), int8[part]["kl_mean"].get<double>() / 10);
    EXPECT_GE(int8[part]["top1_agreement"].get<double>(), 0.5);
    EXPECT_LE(int8[part]["top1_agreement"].get<double>(), 1.0);
    // Every position whose top-1 differs is a flip, with the f32 logits' top-2 margin there.
    const auto positions = int8[part]["positions"].get<double>();
    const auto flips = int8[part]["top1_flips"].get<long long>();
    EXPECT_NEAR(static_cast<double>(flips), positions * (1 - int8[part]["top1_agreement"].get<double>()), 1e-6);
    EXPECT_GE(int8[part]["flip_margin_median"].get<double>(), 0.0);
    EXPECT_LE(int8[part]["flip_margin_median"].get<double>(), int8[part]["flip_margin_p90"].get<double>());
    EXPECT_LE(int8[part]["flip_margin_p90"].get<double>(), int8[part]["flip_margin_max"].get<double>());
  }
  EXPECT_EQ(m["greedy"].size(), 6u);  // 3 goldens x 2 formats
}

// A GGUF model with two KV-cache groups (gemma2's sliding layers): each group gets its tables,
// fp32 reproduces the f32 reference exactly, int8 does not.
TEST_F(BenchAttentionCli, KVDtypeOnAGgufModelWithSlidingLayers) {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  const auto model = std::filesystem::path(shared ? shared : "../shared") / "models" / "gguf" / "tiny-gemma2.f32.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not found";
  int code = -1;
  const std::string out =
      run("'" + bin_ + "' bench kv-dtype --skip-builtin --model '" + model.string() +
              "' --sequences 4 --batch 2 --length 64 --short-context 16 --kv-dtypes fp32,int8 --json "
              "2>/dev/null",
          code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json m = nlohmann::json::parse(out)["models"].at(0);
  ASSERT_EQ(m["teacher_forced"].size(), 2u);
  for (const char* part : {"short", "long"}) {
    EXPECT_EQ(m["teacher_forced"][0][part]["kl_mean"].get<double>(), 0.0) << part;
    EXPECT_EQ(m["teacher_forced"][0][part]["top1_agreement"].get<double>(), 1.0) << part;
    EXPECT_GT(m["teacher_forced"][1][part]["kl_mean"].get<double>(), 0.0) << part;
  }
}

}  // namespace
