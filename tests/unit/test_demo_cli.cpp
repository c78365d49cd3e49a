// `pagedkv demo` and `pagedkv bench engine` end to end: the built binary (PAGEDKV_BIN, set by
// ctest) runs short workloads and the JSON reports are checked field by field.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_test_support.h"

namespace {

using nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out;
};

class DemoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("PAGEDKV_BIN");
    if (bin == nullptr || !std::filesystem::exists(bin)) GTEST_SKIP() << "PAGEDKV_BIN is not set or missing";
    bin_ = bin;
  }
  // Runs the binary with `args` (stderr discarded) and returns its exit code and stdout.
  Result run(const std::string& args) const {
    const pagedkv::testing::CliResult r = pagedkv::testing::run_command(bin_ + " " + args + " 2>/dev/null");
    return {r.exit_code, r.output};
  }
  json run_json(const std::string& args) const {
    const Result r = run(args + " --json");
    EXPECT_EQ(r.exit_code, 0) << args;
    return json::parse(r.out);
  }
  static std::string shared_models() {
    const char* env = std::getenv("PAGEDKV_SHARED_DIR");
    return std::string(env ? env : "../shared") + "/models";
  }
  std::string bin_;
};

// Small enough to run in seconds, small pool so that requests are preempted.
constexpr const char* kSmall = "demo --requests 24 --num-blocks 48 --parallel-fraction 0.25 --cancel-fraction 0.15";
constexpr const char* kSeed3 = " --seed 3";

TEST_F(DemoCli, JsonReportHasEveryFieldAndConsistentNumbers) {
  const std::string snapshot = (std::filesystem::temp_directory_path() / "pagedkv_demo_test.svg").string();
  const json j = run_json(std::string(kSmall) + kSeed3 + " --snapshot " + snapshot);
  EXPECT_TRUE(j["model"]["builtin_random"].get<bool>());
  EXPECT_EQ(j["engine"]["num_blocks"], 48);
  EXPECT_EQ(j["requests"]["submitted"], 24);
  const auto& rq = j["requests"];
  EXPECT_EQ(rq["completed"].get<int>(),
            rq["submitted"].get<int>() - rq["aborted"].get<int>() - rq["rejected"].get<int>());
  EXPECT_EQ(rq["completed"].get<int>(), rq["finished_stop"].get<int>() + rq["finished_length"].get<int>());
  EXPECT_GT(rq["cancelled"].get<int>(), 0);
  EXPECT_GT(rq["parallel_samples_completed"].get<int>(), 0);
  EXPECT_GT(j["throughput"]["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["throughput"]["requests_per_s"].get<double>(), 0);
  const auto& lat = j["latency_ms"];
  EXPECT_LE(lat["ttft_p50"].get<double>(), lat["ttft_p99"].get<double>());
  EXPECT_LE(lat["tpot_p50"].get<double>(), lat["tpot_p99"].get<double>());
  const double hit = j["prefix_cache"]["hit_rate"].get<double>();
  EXPECT_GT(hit, 0.0);
  EXPECT_LE(hit, 1.0);
  EXPECT_GT(j["tokens"]["prompt_from_prefix_cache"].get<int>(), 0);
  EXPECT_LE(j["blocks"]["peak_in_use"].get<int>(), j["blocks"]["usable"].get<int>());
  EXPECT_FALSE(j["blocks"]["in_use_over_time"].empty());
  EXPECT_GT(j["memory"]["contiguous_peak_bytes"].get<double>(), j["memory"]["paged_peak_bytes"].get<double>());
  EXPECT_GT(j["preemptions"]["recompute"].get<int>() + j["preemptions"]["swap"].get<int>(), 0);
  EXPECT_GT(j["cow_copies"].get<int>(), 0);
  const auto& pool = j["pool_snapshot"];
  EXPECT_EQ(pool["moment"], "peak usage");
  EXPECT_EQ(pool["owned"].get<int>() + pool["shared"].get<int>(), j["blocks"]["peak_in_use"].get<int>());
  EXPECT_EQ(
      pool["owned"].get<int>() + pool["shared"].get<int>() + pool["cached_free"].get<int>() + pool["free"].get<int>(),
      j["blocks"]["usable"].get<int>());
  const double f = j["scheduler"]["fraction_of_step"].get<double>();
  EXPECT_GT(f, 0.0);
  EXPECT_LT(f, 1.0);
  EXPECT_EQ(j["output_digest"].get<std::string>().size(), 16u);

  std::ifstream in(snapshot);
  std::stringstream svg;
  svg << in.rdbuf();
  EXPECT_EQ(svg.str().rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.str().find("<title>block "), svg.str().find("<title>block 0: null block"));
  std::filesystem::remove(snapshot);
}

TEST_F(DemoCli, SameSeedSameSchedule) {
  const json a = run_json(std::string(kSmall) + kSeed3), b = run_json(std::string(kSmall) + kSeed3);
  for (const char* key : {"output_digest", "steps", "cow_copies", "preemptions", "requests", "blocks", "tokens"})
    EXPECT_EQ(a[key], b[key]) << key;
  EXPECT_EQ(a["prefix_cache"]["hit_tokens"], b["prefix_cache"]["hit_tokens"]);
  const json c = run_json(std::string(kSmall) + " --seed 4");
  EXPECT_NE(a["output_digest"], c["output_digest"]);
}

TEST_F(DemoCli, EachPreemptionModeAlone) {
  const json r = run_json(std::string(kSmall) + " --preemption recompute");
  EXPECT_GT(r["preemptions"]["recompute"].get<int>(), 0);
  EXPECT_EQ(r["preemptions"]["swap"].get<int>(), 0);
  const json s = run_json(std::string(kSmall) + " --preemption swap");
  EXPECT_GT(s["preemptions"]["swap"].get<int>(), 0);
  // Resumed requests copy back only what the device prefix cache no longer holds.
  EXPECT_LE(s["preemptions"]["blocks_swapped_in"].get<int>(), s["preemptions"]["blocks_swapped_out"].get<int>());
  EXPECT_GT(s["preemptions"]["blocks_swapped_in"].get<int>(), 0);
}

// Per-request records: one per finished output, each with its hits by tier; the report's totals
// are their sums over completed requests; every swapped-out block is accounted for.
void check_records_and_totals(const json& j) {
  const auto& recs = j["request_records"];
  ASSERT_TRUE(recs.is_array());
  int parents = 0, completed = 0, samples = 0;
  json sums = json::object();
  int hit_sum = 0;
  uint64_t last_id = 0;
  for (const json& r : recs) {
    for (const char* key : {"id", "sample_index", "prompt_tokens", "output_tokens", "finish_reason",
                            "prefix_hit_tokens", "hit_tokens_by_tier", "ttft_ms", "preemptions"})
      EXPECT_TRUE(r.contains(key)) << key;
    EXPECT_GT(r["id"].get<uint64_t>(), last_id) << "records are in id order";
    last_id = r["id"].get<uint64_t>();
    const auto& t = r["hit_tokens_by_tier"];
    EXPECT_EQ(t["device"].get<int>() + t["host"].get<int>() + t["disk"].get<int>(), r["prefix_hit_tokens"].get<int>());
    EXPECT_LE(r["prefix_hit_tokens"].get<int>(), r["prompt_tokens"].get<int>());
    const std::string reason = r["finish_reason"];
    if (r["sample_index"].get<int>() > 0) {
      EXPECT_TRUE(r.contains("parent"));
      samples += reason == "stop" || reason == "length";
      continue;
    }
    ++parents;
    if (reason != "stop" && reason != "length") continue;
    ++completed;
    EXPECT_GT(r["output_tokens"].get<int>(), 0);
    EXPECT_GE(r["ttft_ms"].get<double>(), 0.0);
    hit_sum += r["prefix_hit_tokens"].get<int>();
    // Every tier the totals name (device, host, disk, remote), each request's record counting 0
    // for a tier it does not list.
    for (const auto& [tier, total] : j["tokens"]["prompt_from_prefix_cache_by_tier"].items())
      sums[tier] = sums.value(tier, 0) + t.value(tier, 0);
  }
  EXPECT_EQ(parents, j["requests"]["submitted"].get<int>()) << "one record per submitted request";
  EXPECT_EQ(completed, j["requests"]["completed"].get<int>());
  EXPECT_EQ(samples, j["requests"]["parallel_samples_completed"].get<int>());
  EXPECT_EQ(hit_sum, j["tokens"]["prompt_from_prefix_cache"].get<int>());
  EXPECT_EQ(sums, j["tokens"]["prompt_from_prefix_cache_by_tier"]);
  const auto& p = j["preemptions"];
  EXPECT_EQ(p["blocks_swapped_out"].get<uint64_t>(), p["blocks_swapped_in"].get<uint64_t>() +
                                                         p["blocks_swap_resumed_from_cache"].get<uint64_t>() +
                                                         p["blocks_swap_dropped"].get<uint64_t>());
}

TEST_F(DemoCli, RequestRecordsAndTotalsByTier) {
  const json j = run_json(std::string(kSmall) + kSeed3);
  check_records_and_totals(j);
  EXPECT_FALSE(j.contains("tiers")) << "no tiers configured";
  EXPECT_EQ(j["tokens"]["prompt_from_prefix_cache_by_tier"]["host"], 0);
  EXPECT_GT(j["preemptions"]["blocks_swap_resumed_from_cache"].get<int>(), 0);
}

TEST_F(DemoCli, HostAndDiskTiersReportHitsByTier) {
  const json h = run_json(std::string(kSmall) + kSeed3 + " --host-cache-bytes 256KiB");
  check_records_and_totals(h);
  ASSERT_TRUE(h.contains("tiers"));
  EXPECT_TRUE(h["tiers"]["disk"].is_null());
  EXPECT_GT(h["tiers"]["host"]["hits"].get<int>(), 0);
  EXPECT_GT(h["tokens"]["prompt_from_prefix_cache_by_tier"]["host"].get<int>(), 0);
  EXPECT_EQ(h["tokens"]["prompt_from_prefix_cache_by_tier"]["disk"], 0);
  EXPECT_EQ(h["output_digest"], run_json(std::string(kSmall) + kSeed3)["output_digest"])
      << "KV from the host tier gives the same generations";
  // The same command twice on one cache directory: the second run gets disk hits (warm restart).
  const auto dir = std::filesystem::temp_directory_path() / ("pagedkv_demo_disk_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string disk =
      std::string(kSmall) + kSeed3 + " --disk-cache-dir " + dir.string() + " --disk-cache-bytes 4MiB";
  const json first = run_json(disk);
  const json second = run_json(disk);
  check_records_and_totals(second);
  ASSERT_FALSE(second["tiers"]["disk"].is_null());
  EXPECT_GT(second["tokens"]["prompt_from_prefix_cache_by_tier"]["disk"].get<int>(),
            first["tokens"]["prompt_from_prefix_cache_by_tier"]["disk"].get<int>());
  EXPECT_EQ(first["output_digest"], second["output_digest"]);
  const Result text = run(disk);
  EXPECT_NE(text.out.find("prefix-hit tokens by tier: device "), std::string::npos) << text.out;
  std::filesystem::remove_all(dir);
}

TEST_F(DemoCli, TextReportSaysWhichModelAndDrawsThePool) {
  const Result r = run(std::string(kSmall) + " --show-blocks");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* s : {"built-in deterministic random-weight", "time to first token p50", "hit rate",
                        "contiguous per-request reservation", "by recompute", "copy-on-write", "scheduler",
                        "blocks in use over", "pool at peak usage"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos) << "no terminal escapes when stdout is not a terminal";
}

TEST_F(DemoCli, SnapshotAtAChosenStep) {
  const std::string html = (std::filesystem::temp_directory_path() / "pagedkv_demo_test.html").string();
  const json j = run_json(std::string(kSmall) + " --snapshot-step 40 --snapshot " + html);
  EXPECT_EQ(j["pool_snapshot"]["moment"], "step 40");
  EXPECT_EQ(j["pool_snapshot"]["after_step"], 40);
  std::ifstream in(html);
  std::stringstream page;
  page << in.rdbuf();
  EXPECT_EQ(page.str().rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(page.str().find("after step 40 of"), std::string::npos);
  std::filesystem::remove(html);
  EXPECT_EQ(run(std::string(kSmall) + " --snapshot-step 100000 --snapshot " + html).exit_code, 2);
}

TEST_F(DemoCli, BadArgumentsAreReported) {
  EXPECT_EQ(run(std::string(kSmall) + " --snapshot pool.png").exit_code, 2);
  EXPECT_EQ(run("demo --requests 0").exit_code, 2);
  EXPECT_EQ(run("demo --tokenizer tok.bin").exit_code, 2);
}

TEST_F(DemoCli, RealCheckpoint) {
  const std::string dir = shared_models();
  if (!std::filesystem::exists(dir + "/stories260K.bin")) GTEST_SKIP() << dir << " not found";
  const json j = run_json("demo --requests 16 --num-blocks 40 --model " + dir + "/stories260K.bin --tokenizer " + dir +
                          "/tok512.bin");
  EXPECT_FALSE(j["model"]["builtin_random"].get<bool>());
  EXPECT_EQ(j["engine"]["max_model_len"], 512);
  EXPECT_GT(j["requests"]["completed"].get<int>(), 0);
  EXPECT_GT(j["prefix_cache"]["hit_rate"].get<double>(), 0.0);
}

TEST_F(DemoCli, BenchEngineQuick) {
  const json j = run_json(
      "bench engine --batch-sizes 1,4 --max-tokens 8 --repeats 1 --ttft-requests 4 "
      "--system-prompt-tokens 64");
  ASSERT_GE(j["throughput"].size(), 2u);
  for (const json& t : j["throughput"]) {
    EXPECT_GT(t["output_tokens_per_s"].get<double>(), 0);
    EXPECT_GE(t["scheduler_fraction"].get<double>(), 0);
    EXPECT_LT(t["scheduler_fraction"].get<double>(), 1);
  }
  ASSERT_FALSE(j["ttft"].empty());
  for (const json& t : j["ttft"])
    EXPECT_LT(t["prompt_tokens_computed_caching"].get<int>(), t["prompt_tokens_computed_no_caching"].get<int>());
}

}  // namespace
