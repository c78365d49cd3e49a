// End to end: runs the built `pagedkv bench decode` (ctest sets PAGEDKV_BIN) on the tiny shape
// in two weight types, checks the JSON report's keys and invariants, that the generated files
// are removed, and that bad options are named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "cli_test_support.h"

namespace {

using DecodeBenchCli = pagedkv::testing::CliTest;

TEST_F(DecodeBenchCli, TinyModelsReportTheirBandwidthShare) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "pagedkv-decode-bench-cli";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto [code, out] = pagedkv("bench decode --json --shape tiny --types f16,Q8_0 --batch-sizes 1,3 --steps 2 "
                                   "--rounds 2 --bandwidth-mib 8 --threads 1 --dir '" + dir.string() + "'",
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
  const double ratio = j["models"][0]["weight_bytes_per_step"].get<double>() / j["models"][1]["weight_bytes_per_step"].get<double>();
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

}  // namespace
