// End to end: `pagedkv bench paper --quick` (ctest sets PAGEDKV_BIN) with the engine's checkers
// after every step (the contiguous allocator's and the manager's invariants), and the structure
// of what it reports. The clock is modelled, so the figures are the same on every machine; still
// only orderings and bounds that follow from the policies are checked, not the paper's targets.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace {

class PaperBenchCli : public pagedkv::testing::CliTest {
 protected:
  std::string run(const std::string& args, int& exit_code) const {
    const pagedkv::testing::CliResult r = pagedkv(args);
    exit_code = r.exit_code;
    return r.output;
  }
};

TEST_F(PaperBenchCli, QuickRunHasTheStructureThePoliciesImply) {
  int code = -1;
  const std::string out =
      run("bench paper --quick --json --check-invariants --workloads sharegpt --parallel-n 2 --beam-widths 2,4 "
          "--parallel-workloads sharegpt",
          code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_TRUE(j.contains("rate_ratio_vs_oracle") && j.contains("rate_ratio_vs_max") &&
              j.contains("token_state_share_paged"));
  // Paging wastes at most the tail of each sequence's last block.
  EXPECT_GE(j["token_state_share_paged"].get<double>(), 0.96);
  const nlohmann::json& w = j.at("workloads").at(0);
  std::map<std::string, nlohmann::json> p;
  for (const nlohmann::json& jp : w["policies"]) p[jp["policy"].get<std::string>()] = jp;
  ASSERT_EQ(p.size(), 4u);
  for (const auto& [name, jp] : p) {
    const nlohmann::json& m = jp["memory"];
    const double sum = m["token_states"].get<double>() + m["reserved"].get<double>() +
                       m["internal_fragmentation"].get<double>() + m["external_fragmentation"].get<double>() +
                       m["free"].get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-9) << name;
    EXPECT_GT(m["token_states"].get<double>(), 0) << name;
    EXPECT_GT(jp["sustained_rate"].get<double>(), 0) << name;
    for (const nlohmann::json& point : jp["curve"]) {
      EXPECT_EQ(point["rejected"].get<int>(), 0) << name;
      EXPECT_EQ(point["completed"].get<int>(), j["setup"]["requests_per_run"].get<int>()) << name;
      EXPECT_GT(point["normalized_latency_s"].get<double>(), 0) << name;
    }
  }
  // Paged reserves nothing ahead and cannot fragment externally.
  EXPECT_EQ(p["paged"]["memory"]["reserved"].get<double>(), 0);
  EXPECT_EQ(p["paged"]["memory"]["external_fragmentation"].get<double>(), 0);
  // Per running sequence, an oracle reservation is never larger than pow2's, nor pow2's than max's.
  auto per_seq = [&](const char* name) { return p[name]["memory"]["mean_slots_per_running"].get<double>(); };
  EXPECT_LE(per_seq("oracle"), per_seq("pow2"));
  EXPECT_LE(per_seq("pow2"), per_seq("max"));
  // The oracle over-reserves only by rounding: to whole blocks and (buddy ranges, the default)
  // to a power of two of them, which wastes less than half of what it holds.
  const nlohmann::json& om = p["oracle"]["memory"];
  EXPECT_LT(om["internal_fragmentation"].get<double>(),
            0.5 * (om["token_states"].get<double>() + om["reserved"].get<double>() +
                   om["internal_fragmentation"].get<double>()));
  EXPECT_EQ(j["setup"]["range_allocation"].get<std::string>(), "buddy");
  // More sequences fit when less is reserved, so the sustained rates are ordered too.
  const double paged = p["paged"]["sustained_rate"].get<double>();
  EXPECT_GE(paged, p["oracle"]["sustained_rate"].get<double>());
  EXPECT_GE(p["oracle"]["sustained_rate"].get<double>(), p["max"]["sustained_rate"].get<double>());
  EXPECT_NEAR(j["rate_ratio_vs_oracle"].get<double>(), paged / p["oracle"]["sustained_rate"].get<double>(), 1e-9);
  EXPECT_NEAR(j["rate_ratio_vs_max"].get<double>(), paged / p["max"]["sustained_rate"].get<double>(), 1e-9);
  // Two samples share their prompt's blocks.
  const nlohmann::json& sharing = w.at("parallel_sampling");
  ASSERT_TRUE(sharing.is_array() && sharing.size() == 1u) << sharing.dump();
  const double saving = sharing.at(0).at("memory_saving").get<double>();
  EXPECT_GT(saving, 0);
  EXPECT_LT(saving, 0.5);
  // Beams share the prompt and every common ancestor's blocks: more than two parallel samples
  // share (they part after the prompt), and more at width 4 than at width 2.
  const nlohmann::json& beam = w.at("beam_search");
  ASSERT_TRUE(beam.is_array() && beam.size() == 2u) << beam.dump();
  const double beam2 = beam.at(0).at("memory_saving").get<double>(),
               beam4 = beam.at(1).at("memory_saving").get<double>();
  EXPECT_GT(beam2, saving);
  EXPECT_GT(beam4, beam2);
  EXPECT_LT(beam4, 1.0);
}

TEST_F(PaperBenchCli, BadOptionsAreClearErrors) {
  int code = -1;
  std::string out = run("bench paper --quick --workloads nope", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("unknown workload"), std::string::npos) << out;
  out = run("bench paper --quick --latency-limit 0", code);
  EXPECT_EQ(code, 2) << out;
  out = run("bench paper --quick --beam-widths 1", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--beam-widths"), std::string::npos) << out;
}

}  // namespace
