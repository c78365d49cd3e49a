// End to end: runs the built `pagedkv bench decode` (ctest sets PAGEDKV_BIN) on the tiny shape
// in two weight types, checks the JSON report's keys and invariants, that the generated files
// are removed, and that bad options are named; its prefill mode; the mixture-of-experts shape with
// a tokenizer copied in.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>

#include "cli_test_support.h"
#include "pagedkv/model/format/gguf_file.h"

namespace {

using DecodeBenchCli = pagedkv::testing::CliTest;

TEST_F(DecodeBenchCli, TinyModelsReportTheirBandwidthShare) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "pagedkv-decode-bench-cli";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto [code, out] = pagedkv(
      "bench decode --json --shape tiny --types f16,Q8_0 --batch-sizes 1,3 --steps 2 "
      "--rounds 2 --bandwidth-mib 8 --threads 1 --dir '" +
          dir.string() + "'",
      false);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["models"].size(), 2u);
  for (const auto& m : j["models"]) {
    EXPECT_GT(m["weight_bytes_per_step"].get<double>(), 0);
    EXPECT_GT(m["read_bandwidth_gbps_median"].get<double>(), 0);
    ASSERT_EQ(m["batches"].size(), 2u);
    EXPECT_EQ(m["batches"][0]["batch"], 1);
    EXPECT_DOUBLE_EQ(m["batches"][0]["vs_first_batch_median"].get<double>(), 1.0);
    for (const auto& b : m["batches"]) {
      EXPECT_GT(b["tokens_per_s_median"].get<double>(), 0);
      EXPECT_GE(b["tokens_per_s_best"].get<double>(), b["tokens_per_s_median"].get<double>());
      EXPECT_EQ(b["runs_tokens_per_s"].size(), 2u);
    }
  }
  // The F16 file holds twice the Q8_0 file's matrix bytes, near enough (Q8_0: 34 bytes per 32).
  const double ratio =
      j["models"][0]["weight_bytes_per_step"].get<double>() / j["models"][1]["weight_bytes_per_step"].get<double>();
  EXPECT_NEAR(ratio, 64.0 / 34.0, 0.05);
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "generated models were left behind";
  std::filesystem::remove_all(dir);

  const pagedkv::testing::CliResult bad_type = pagedkv("bench decode --shape tiny --types q5_k");
  EXPECT_NE(bad_type.output.find("q5_k"), std::string::npos) << bad_type.output;
  EXPECT_EQ(bad_type.exit_code, 2);
  const pagedkv::testing::CliResult bad_shape = pagedkv("bench decode --shape llama-70b");
  EXPECT_NE(bad_shape.output.find("llama-70b"), std::string::npos) << bad_shape.output;
  EXPECT_EQ(bad_shape.exit_code, 2);
}

TEST_F(DecodeBenchCli, PrefillModeReportsPromptTokensPerSecond) {
  // 40 tokens in steps of 16: three chunks, as serve schedules a long prompt.
  const auto [code, out] = pagedkv(
      "bench decode --json --shape tiny --types q8_0 --prefill 40 --max-num-batched-tokens 16 "
      "--rounds 2 --threads 1",
      false);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["prefill_tokens"], 40);
  ASSERT_EQ(j["models"].size(), 1u);
  const auto& m = j["models"][0];
  EXPECT_FALSE(m.contains("batches"));
  EXPECT_EQ(m["prefill"]["tokens"], 40);
  EXPECT_EQ(m["prefill"]["runs_tokens_per_s"].size(), 2u);
  EXPECT_GT(m["prefill"]["tokens_per_s_median"].get<double>(), 0);
  EXPECT_GE(m["prefill"]["tokens_per_s_best"].get<double>(), m["prefill"]["tokens_per_s_median"].get<double>());

  const pagedkv::testing::CliResult bad = pagedkv("bench decode --shape tiny --prefill -3");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

TEST_F(DecodeBenchCli, MixtureOfExpertsShapeWithACopiedTokenizer) {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  if (shared == nullptr) GTEST_SKIP() << "PAGEDKV_SHARED_DIR is not set";
  const std::string tokenizer =
      std::string(shared) + "/models/stories260Ktok512.gguf";  // 512 tokens, as the tiny shapes
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "pagedkv-decode-bench-cli-moe";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto [code, out] = pagedkv(
      "bench decode --json --shape tiny-moe --types f16 --batch-sizes 1 --steps 2 --rounds 1 "
      "--bandwidth-mib 8 --threads 1 --keep --tokenizer-from '" +
          tokenizer + "' --dir '" + dir.string() + "'",
      false);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  const std::string path = std::filesystem::directory_iterator(dir)->path().string();
  {
    const pagedkv::GgufFile file(path);
    const pagedkv::GgufFile source(tokenizer);
    EXPECT_EQ(file.get_string("general.architecture"), "qwen3moe");
    ASSERT_NE(file.find("tokenizer.ggml.tokens"), nullptr);
    EXPECT_EQ(file.find("tokenizer.ggml.tokens")->size(), 512u);
    EXPECT_EQ(file.find("tokenizer.ggml.tokens")->strings("t")[300],
              source.find("tokenizer.ggml.tokens")->strings("t")[300]);
    EXPECT_EQ(file.get_string("tokenizer.ggml.model"), source.get_string("tokenizer.ggml.model"));
    const pagedkv::GgufTensor* experts = file.find_tensor("blk.1.ffn_gate_exps.weight");
    ASSERT_NE(experts, nullptr);
    EXPECT_EQ(experts->ne, (std::vector<int64_t>{64, 32, 4}));  // [dim, expert width, experts]
    // A batch-1 step reads 2 of the 4 experts: the step's bytes are less than the file's tensors.
    double all_bytes = 0;
    for (const pagedkv::GgufTensor& t : file.tensors()) all_bytes += static_cast<double>(t.bytes);
    EXPECT_LT(j["models"][0]["weight_bytes_per_step"].get<double>(), all_bytes);
  }
  // The file serves: its tokenizer encodes text.
  const pagedkv::testing::CliResult generated =
      pagedkv("generate -m '" + path + "' --prompt 'Once upon a time' -n 12", false);
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
  std::filesystem::remove_all(dir);

  const pagedkv::testing::CliResult mismatch =
      pagedkv("bench decode --shape llama-3.2-1b --tokenizer-from '" + tokenizer + "' --dir '" + dir.string() + "'");
  EXPECT_EQ(mismatch.exit_code, 2) << mismatch.output;
  EXPECT_NE(mismatch.output.find("512 tokens"), std::string::npos) << mismatch.output;
}

}  // namespace
