// End to end: runs the built `pagedkv bench hybrid` (ctest sets PAGEDKV_BIN) on a small
// workload and checks the JSON report's keys and its invariants.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace {

using HybridBenchCli = pagedkv::testing::CliTest;

TEST_F(HybridBenchCli, JsonReportsBothModelsAndTheirRatio) {
  const auto [code, out] = pagedkv(
      "bench hybrid --json --sweep --sessions 6 --turns 3 --system-tokens 200 --user-tokens 50 "
      "--output-tokens 40 --concurrency 2 --window 64");
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  const auto hybrid = j["hybrid"]["hit_tokens"].get<uint64_t>();
  const auto full = j["full"]["hit_tokens"].get<uint64_t>();
  EXPECT_GT(full, 0u);
  EXPECT_DOUBLE_EQ(j["hybrid_over_full_hit_tokens"].get<double>(),
                   static_cast<double>(hybrid) / static_cast<double>(full));
  EXPECT_GE(j["hybrid_over_full_hit_tokens"].get<double>(), 0.95);
  EXPECT_LT(j["hybrid"]["peak_blocks_in_use"].get<int>(), j["full"]["peak_blocks_in_use"].get<int>());
  EXPECT_EQ(j["hybrid"]["prompt_tokens"], j["full"]["prompt_tokens"]);
  EXPECT_GE(j["sweep"].size(), 2u);
  const pagedkv::testing::CliResult bad = pagedkv("bench hybrid --sessions 0");
  EXPECT_NE(bad.output.find("sessions"), std::string::npos);
  EXPECT_EQ(bad.exit_code, 2);
}

}  // namespace
