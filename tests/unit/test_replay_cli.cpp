// The `pagedkv replay` command end to end: formats, errors with line numbers, sweeps and plots.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace {

struct CliRun {
  int status = -1;
  std::string out;
};

// Runs the pagedkv binary with `args` (stdout captured; stderr merged when asked).
CliRun pagedkv(const std::string& args, bool merge_stderr = false) {
  const pagedkv::testing::CliResult r = pagedkv::testing::run_command(std::string(std::getenv("PAGEDKV_BIN")) + " " +
                                                                      args + (merge_stderr ? " 2>&1" : " 2>/dev/null"));
  return {r.exit_code, r.output};
}

class ReplayCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("PAGEDKV_BIN");
    if (bin == nullptr || !std::filesystem::exists(bin)) GTEST_SKIP() << "PAGEDKV_BIN not set or not built";
    dir_ = std::filesystem::temp_directory_path() / ("pagedkv_replay_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream trace(dir_ / "t.jsonl");
    for (int i = 0; i < 40; ++i)
      trace << "{\"timestamp\": " << i << ", \"input_length\": " << 600 + 10 * i
            << ", \"output_length\": 3, \"hash_ids\": [0, " << 100 + i % 5 << "]}\n";
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(ReplayCli, JsonHasTheRequiredFields) {
  const CliRun r = pagedkv("replay " + path("t.jsonl") + " --block-size 64 --capacity-tokens 1e5 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"block_hit_rate", "token_hit_rate", "request_hit_rate", "requests", "evictions"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["requests"], 40);
  EXPECT_EQ(j["capacity_blocks"], 1562);  // 1e5 tokens / 64, rounded down
  EXPECT_GT(j["block_hit_rate"].get<double>(), 0.5);
}

TEST_F(ReplayCli, SweepPrintsCsvAndTable) {
  const CliRun csv = pagedkv("replay " + path("t.jsonl") + " --block-size 128 --sweep 8,16,inf --policy lru,lfu --csv");
  ASSERT_EQ(csv.status, 0) << csv.out;
  EXPECT_EQ(csv.out.rfind("trace,policy,block_size,capacity_blocks", 0), 0u) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 1 + 6);
  EXPECT_NE(csv.out.find(",lfu,128,inf,"), std::string::npos);
  const CliRun table = pagedkv("replay " + path("t.jsonl") + " --block-size 128 --capacity-blocks 16");
  ASSERT_EQ(table.status, 0);
  EXPECT_NE(table.out.find("token"), std::string::npos);
}

TEST_F(ReplayCli, BadLineNamesFileAndLine) {
  std::ofstream(path("bad.jsonl")) << "{\"input_length\": 10, \"hash_ids\": [1]}\n{\"input_length\": 10}\n";
  const CliRun r = pagedkv("replay " + path("bad.jsonl") + " --format mooncake --capacity-blocks 10", true);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("bad.jsonl:2: missing field \"hash_ids\""), std::string::npos) << r.out;
  const CliRun lenient = pagedkv("replay " + path("bad.jsonl") + " --lenient --capacity-blocks 10 --json", true);
  EXPECT_EQ(lenient.status, 0) << lenient.out;
  EXPECT_NE(lenient.out.find("skipped 1 bad lines"), std::string::npos) << lenient.out;
}

TEST_F(ReplayCli, UsageErrors) {
  EXPECT_EQ(pagedkv("replay " + path("t.jsonl")).status, 2);  // no capacity
  EXPECT_EQ(pagedkv("replay " + path("t.jsonl") + " --capacity-blocks 10 --policy mru").status, 2);
  EXPECT_EQ(pagedkv("replay " + path("t.jsonl") + " --capacity-blocks ten").status, 2);
  EXPECT_EQ(pagedkv("replay " + path("t.jsonl") + " --mode timed").status, 2);  // no capacity
  EXPECT_NE(pagedkv("replay /nonexistent.jsonl --capacity-blocks 10").status, 0);
}

TEST_F(ReplayCli, ClusterModeComparesLocalAndGlobal) {
  const CliRun r = pagedkv("replay " + path("t.jsonl") +
                           " --mode cluster --instances 3 --router cache-aware "
                           "--block-size 64 --capacity-blocks 40 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["instances"], 3);
  EXPECT_EQ(j["global"]["capacity_blocks"], 120);
  EXPECT_EQ(j["per_instance"].size(), 3u);
  EXPECT_GE(j["global"]["token_hit_rate"].get<double>(), j["local"]["token_hit_rate"].get<double>());
}

TEST_F(ReplayCli, TimedModeReportsLatencies) {
  const CliRun r = pagedkv("replay " + path("t.jsonl") +
                           " --mode timed --block-size 16 --capacity-tokens 20000 "
                           "--timeline " +
                           path("tl.csv") + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["finished"], 40);
  for (const char* key : {"ttft", "tpot", "queueing", "e2e"}) EXPECT_TRUE(j[key].contains("p99_s")) << key;
  EXPECT_GT(j["token_hit_rate"].get<double>(), 0.0);
  std::ifstream tl(path("tl.csv"));
  std::string header;
  std::getline(tl, header);
  EXPECT_EQ(header, "time_s,pool_usage,running,waiting,swapped,finished,hit_rate");
}

TEST_F(ReplayCli, PlotWritesAnSvg) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const CliRun r = pagedkv("replay " + path("t.jsonl") + " --block-size 64 --unit tokens --sweep 1e3,1e4,inf --plot " +
                           path("p.svg"));
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream svg(path("p.svg"));
  const std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("token hit rate (%)"), std::string::npos);
  EXPECT_NE(text.find("cache capacity (tokens"), std::string::npos);
}

}  // namespace
