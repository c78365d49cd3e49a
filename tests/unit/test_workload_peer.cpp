// kvcache-peer-v1: our generator must produce the README's workload exactly, and replaying it
// with vLLM v1's scheduling rules must reproduce vLLM's own counters to the unit.
#include <gtest/gtest.h>

#include "pagedkv/workload/kvcache_peer.h"

namespace pagedkv {
namespace {

TEST(PeerWorkload, PrngCheckValues) {
  SplitMix64 rng(PeerWorkload::kSeed);
  EXPECT_EQ(rng.next(), 0xad6a8062b7f8f969ull);
  EXPECT_EQ(rng.next(), 0x1dc7108db4791edbull);
  EXPECT_EQ(rng.next(), 0xb5bb08378bfa9283ull);
}

TEST(PeerWorkload, GeneratedExactly) {
  const PeerWorkload w = PeerWorkload::generate();
  ASSERT_EQ(w.prompts.size(), 2000u);
  EXPECT_EQ(std::vector<TokenId>(w.system_prompt.begin(), w.system_prompt.begin() + 4),
            (std::vector<TokenId>{105, 475, 31107, 28478}));
  EXPECT_EQ(std::vector<TokenId>(w.prompts[1].begin(), w.prompts[1].begin() + 3),
            (std::vector<TokenId>{4888, 13200, 27}));
  EXPECT_EQ(w.prompts[0][1024], 3424);
  EXPECT_EQ(w.prompts[0][1025], 9347);
  const size_t first5[] = {1729, 1225, 1374, 1121, 1887};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(w.prompts[i].size(), first5[i]);
  EXPECT_EQ(w.total_prompt_tokens(), 2608990u);
  EXPECT_EQ(w.rolling_checksum(), 0x95ff3b81f259d8a1ull);
}

TEST(PeerWorkload, ScenarioAReproducesVllmCounters) {
  const PeerWorkload w = PeerWorkload::generate();
  for (HashAlgorithm hash : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256}) {
    const PeerResult r = replay_peer(w, PeerScenario::by_name("A"), hash);
    const PeerCounters& c = r.counters;
    const PeerCounters ref = peer_reference_counters_a();
    EXPECT_EQ(c.steps, ref.steps);
    EXPECT_EQ(c.preemptions, ref.preemptions);
    EXPECT_EQ(c.finished, ref.finished);
    EXPECT_EQ(c.admissions_ok, ref.admissions_ok);
    EXPECT_EQ(c.admissions_failed, ref.admissions_failed);
    EXPECT_EQ(c.decode_calls, ref.decode_calls);
    EXPECT_EQ(c.prefill_chunk_calls, ref.prefill_chunk_calls);
    EXPECT_EQ(c.evictions, ref.evictions);
    EXPECT_EQ(c.first_admission_hits, ref.first_admission_hits);
    EXPECT_EQ(c.first_admission_queries, ref.first_admission_queries);
    EXPECT_EQ(c.lookup_hits, ref.lookup_hits);
    EXPECT_EQ(c.lookup_queries, ref.lookup_queries);
    EXPECT_EQ(c.peak_running, ref.peak_running);
    EXPECT_EQ(c.free_blocks_at_end, ref.free_blocks_at_end);
  }
}

TEST(PeerWorkload, ScenarioBRunsToCompletionUnderHeavyPreemption) {
  const PeerWorkload w = PeerWorkload::generate();
  const PeerResult r = replay_peer(w, PeerScenario::by_name("B"), HashAlgorithm::kXxh3_128);
  EXPECT_EQ(r.counters.finished, 2000u);
  EXPECT_GT(r.counters.preemptions, 0u);
  EXPECT_EQ(r.counters.decode_calls, 254000u);  // every request decodes 127 times, preempted or not
  EXPECT_EQ(r.counters.free_blocks_at_end, 2047);
}

}  // namespace
}  // namespace pagedkv
