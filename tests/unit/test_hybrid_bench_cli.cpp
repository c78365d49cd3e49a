// End to end: runs the built `pagedkv bench hybrid` (ctest sets PAGEDKV_BIN) on a small
// workload and checks the JSON report's keys and its invariants.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::string run(const std::string& args, int& exit_code) {
  const char* bin = std::getenv("PAGEDKV_BIN");
  std::string command = "'";
  command += bin;
  command += "' ";
  command += args;
  command += " 2>&1";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(HybridBenchCli, JsonReportsBothModelsAndTheirRatio) {
  const char* bin = std::getenv("PAGEDKV_BIN");
  if (bin == nullptr || *bin == '\0' || !std::filesystem::exists(bin)) GTEST_SKIP() << "PAGEDKV_BIN is not set (run through ctest)";
  int code = -1;
  const std::string out = run("bench hybrid --json --sweep --sessions 6 --turns 3 --system-tokens 200 --user-tokens 50 "
                              "--output-tokens 40 --concurrency 2 --window 64",
                              code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  const auto hybrid = j["hybrid"]["hit_tokens"].get<uint64_t>();
  const auto full = j["full"]["hit_tokens"].get<uint64_t>();
  EXPECT_GT(full, 0u);
  EXPECT_DOUBLE_EQ(j["hybrid_over_full_hit_tokens"].get<double>(), static_cast<double>(hybrid) / static_cast<double>(full));
  EXPECT_GE(j["hybrid_over_full_hit_tokens"].get<double>(), 0.95);
  EXPECT_LT(j["hybrid"]["peak_blocks_in_use"].get<int>(), j["full"]["peak_blocks_in_use"].get<int>());
  EXPECT_EQ(j["hybrid"]["prompt_tokens"], j["full"]["prompt_tokens"]);
  EXPECT_GE(j["sweep"].size(), 2u);
  EXPECT_NE(run("bench hybrid --sessions 0", code).find("sessions"), std::string::npos);
  EXPECT_EQ(code, 2);
}

}  // namespace
