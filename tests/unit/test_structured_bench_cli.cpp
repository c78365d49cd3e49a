// End to end: runs the built `pagedkv bench structured` (ctest sets PAGEDKV_BIN) on a small GGUF
// model of ../shared, checks the JSON report (every schema at every batch size, constrained
// outputs of at least one token, rates and compile times positive), --mask-overlap both (a row per
// setting, the same constrained tokens: the masks are the same) with --only, and that bad options
// are named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "cli_test_support.h"

namespace {

using StructuredBenchCli = pagedkv::testing::CliTest;

TEST_F(StructuredBenchCli, ReportsEverySchemaAtEveryBatchSize) {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  const std::string model = std::string(shared ? shared : "../shared") + "/models/gguf/small-llama.q8_0.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is absent (set PAGEDKV_SHARED_DIR)";
  const auto [code, out] = pagedkv(
      "bench structured --json --model '" + model + "' --batch-sizes 1,3 --max-tokens 8 --repeats 1 --threads 1",
      false);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["vocabulary"], 512);
  ASSERT_EQ(j["results"].size(), 10u);
  std::set<std::string> names;
  for (const auto& r : j["results"]) {
    names.insert(r["schema"].get<std::string>());
    EXPECT_GT(r["compile_ms"].get<double>(), 0);
    EXPECT_GT(r["unconstrained_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(r["constrained_tokens_per_s"].get<double>(), 0);
    EXPECT_GE(r["constrained_tokens"].get<int>(), r["batch"].get<int>());  // at least one token a request
    EXPECT_LE(r["constrained_tokens"].get<int>(), 8 * r["batch"].get<int>());
  }
  EXPECT_EQ(names.size(), 5u);

  const pagedkv::testing::CliResult bad = pagedkv("bench structured --batch-sizes 0");
  EXPECT_NE(bad.output.find("--batch-sizes"), std::string::npos) << bad.output;
  EXPECT_NE(bad.exit_code, 0);
}

TEST_F(StructuredBenchCli, MaskOverlapBothGivesOneRowPerSetting) {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  const std::string model = std::string(shared ? shared : "../shared") + "/models/gguf/small-llama.q8_0.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is absent (set PAGEDKV_SHARED_DIR)";
  const auto [code, out] =
      pagedkv("bench structured --json --model '" + model +
                  "' --mask-overlap both --only regex --batch-sizes 2 --max-tokens 6 --repeats 1 --threads 1",
              false);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["schema"], "regex [a-z ]+");
  EXPECT_TRUE(j["results"][0]["mask_overlap"].get<bool>());
  EXPECT_FALSE(j["results"][1]["mask_overlap"].get<bool>());
  EXPECT_EQ(j["results"][0]["constrained_tokens"], j["results"][1]["constrained_tokens"]);

  const pagedkv::testing::CliResult bad = pagedkv("bench structured --mask-overlap sometimes");
  EXPECT_NE(bad.output.find("--mask-overlap"), std::string::npos) << bad.output;
  EXPECT_NE(bad.exit_code, 0);
}

}  // namespace
