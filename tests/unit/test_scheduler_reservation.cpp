// The scheduler's KV reservation policies (the PagedAttention paper's Orca baselines): sizes,
// contiguous ranges held from admission to finish, head-of-line waiting, and the memory
// breakdown. Driven without a model (made-up tokens); both checkers after every call.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "core_test_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/scheduler/scheduler.h"

namespace pagedkv {
namespace {

using testing::full_attention_config;
using testing::iota_tokens;

TEST(KVReservation, SizesOfEachPolicy) {
  // prompt 10, max_tokens 100, actual output 25, max_model_len 2048.
  EXPECT_EQ(kv_reservation_tokens(KVReservation::kMax, 10, 100, 25, 2048), 110);
  EXPECT_EQ(kv_reservation_tokens(KVReservation::kPow2, 10, 100, 25, 2048), 42);
  EXPECT_EQ(kv_reservation_tokens(KVReservation::kOracle, 10, 100, 25, 2048), 35);
  EXPECT_EQ(kv_reservation_tokens(KVReservation::kPow2, 10, 100, 32, 2048), 42);
  EXPECT_EQ(kv_reservation_tokens(KVReservation::kOracle, 10, 100, -1, 2048), 110);  // unknown: as max
  EXPECT_EQ(kv_reservation_tokens(KVReservation::kMax, 10, 5000, 25, 2048), 2048);  // capped
  EXPECT_THROW(kv_reservation_tokens(KVReservation::kPaged, 10, 100, 25, 2048), UsageError);
  EXPECT_EQ(parse_kv_reservation("pow2"), KVReservation::kPow2);
  EXPECT_THROW(parse_kv_reservation("orca"), ConfigError);
}

struct Harness {
  KVCacheManager manager;
  Scheduler scheduler;
  TokenId next_token = 100000;
  std::vector<SchedulerRequest*> finished;

  Harness(int num_blocks, int block_size, KVReservation policy, int max_seqs = 64, int budget = 256)
      : manager(config_for(num_blocks, block_size)), scheduler(sched(policy, max_seqs, budget), manager, 0) {}
  static KVCacheManagerConfig config_for(int num_blocks, int block_size) {
    KVCacheManagerConfig c = full_attention_config(num_blocks, block_size);
    c.max_model_len = 512;
    return c;
  }
  static SchedulerConfig sched(KVReservation policy, int max_seqs, int budget) {
    SchedulerConfig c;
    c.max_num_seqs = max_seqs;
    c.max_num_batched_tokens = budget;
    c.preemption_mode = PreemptionMode::kRecompute;
    c.kv_reservation = policy;
    c.range_allocation = RangeAllocation::kFirstFit;  // exact lengths: the sizes below are first fit's
    return c;
  }
  SchedulerRequest& add(uint64_t id, int prompt, int max_tokens, int output) {
    auto r = std::make_unique<SchedulerRequest>();
    r->kv = Request(RequestId{id}, iota_tokens(prompt, static_cast<TokenId>(id * 1000)));
    r->stop.max_tokens = max_tokens;
    r->stop.known_output_tokens = output;
    return scheduler.add_request(std::move(r));
  }
  void check() {
    manager.check_invariants();
    scheduler.check_invariants();
    const KVMemoryBreakdown m = scheduler.memory_breakdown();
    EXPECT_EQ(m.used() + m.external_fragmentation + m.free, m.total_slots);
    EXPECT_GE(m.token_states, 0);
    EXPECT_GE(m.reserved, 0);
    EXPECT_GE(m.internal_fragmentation, 0);
    EXPECT_GE(m.external_fragmentation, 0);
  }
  SchedulerOutput step() {
    SchedulerOutput out = scheduler.schedule();
    check();
    std::vector<SampledTokens> sampled(out.chunks.size());
    for (SampledTokens& s : sampled) s.token = next_token++;
    for (SchedulerRequest* r : scheduler.update(out, sampled)) finished.push_back(r);
    check();
    return out;
  }
};

TEST(SchedulerReservation, OracleHoldsOneContiguousRangeUntilItFinishes) {
  Harness h(/*num_blocks=*/17, /*block_size=*/4, KVReservation::kOracle);
  SchedulerRequest& a = h.add(1, 6, 400, 10);  // 16 tokens: 4 blocks
  SchedulerOutput out = h.step();
  ASSERT_EQ(a.status, RequestStatus::kRunning);
  ASSERT_EQ(a.reserved_blocks.size(), 4u);
  EXPECT_EQ(h.scheduler.reserved_blocks_in_use(), 4);
  EXPECT_EQ(h.manager.num_free_blocks(), 16);  // the manager's pool is not touched
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(h.scheduler.block_ids(a)[i].value, a.reserved_blocks[0].value + static_cast<int32_t>(i));
  KVMemoryBreakdown m = h.scheduler.memory_breakdown();
  EXPECT_EQ(m.token_states, 6);
  EXPECT_EQ(m.reserved, 15 - 6);  // it will fill prompt + output - 1 slots
  EXPECT_EQ(m.internal_fragmentation, 1);  // 16 reserved
  while (!a.finished()) h.step();
  EXPECT_EQ(a.finish_reason, FinishReason::kStop);
  EXPECT_EQ(a.num_output_tokens(), 10);
  EXPECT_EQ(h.scheduler.reserved_blocks_in_use(), 0);
}

TEST(SchedulerReservation, MaxReservesTheDeclaredMaximumAndWaitsForARange) {
  Harness h(17, 4, KVReservation::kMax);
  SchedulerRequest& a = h.add(1, 4, 28, 2);  // 32 tokens: 8 blocks, though it writes 5 slots
  SchedulerRequest& b = h.add(2, 4, 28, 2);
  SchedulerRequest& c = h.add(3, 4, 28, 2);  // 24 blocks wanted of 16: c waits
  h.step();
  EXPECT_EQ(a.status, RequestStatus::kRunning);
  EXPECT_EQ(b.status, RequestStatus::kRunning);
  EXPECT_EQ(c.status, RequestStatus::kWaiting);
  const KVMemoryBreakdown m = h.scheduler.memory_breakdown();
  EXPECT_EQ(m.internal_fragmentation, 2 * (32 - 5));
  while (!a.finished()) h.step();
  h.step();
  EXPECT_EQ(c.status, RequestStatus::kRunning);
  EXPECT_EQ(h.scheduler.stats().preemptions_recompute, 0u);
}

TEST(SchedulerReservation, ExternalFragmentationBlocksTheHeadOfTheQueue) {
  Harness h(11, 1, KVReservation::kOracle, 64, 64);  // ten one-token blocks
  SchedulerRequest& x = h.add(1, 1, 100, 2);  // 3 slots: ids 1..3
  SchedulerRequest& y = h.add(2, 1, 100, 5);  // 6 slots: ids 4..9
  SchedulerRequest& big = h.add(3, 2, 100, 20);  // 22 > 10: rejected
  h.step();
  EXPECT_EQ(big.finish_reason, FinishReason::kRejected);
  h.step();
  ASSERT_TRUE(x.finished());
  ASSERT_EQ(y.status, RequestStatus::kRunning);
  SchedulerRequest& w = h.add(4, 2, 100, 2);  // 4 slots: 4 are free, but as 1..3 and 10
  h.step();
  EXPECT_EQ(w.status, RequestStatus::kWaiting);
  const KVMemoryBreakdown m = h.scheduler.memory_breakdown();
  EXPECT_EQ(m.external_fragmentation, 1);
  EXPECT_EQ(m.free, 3);
  while (!y.finished()) h.step();
  h.step();
  EXPECT_EQ(w.status, RequestStatus::kRunning);
}

TEST(SchedulerReservation, ParallelSamplingAndBadLengthsAreRejectedClearly) {
  Harness h(17, 4, KVReservation::kPow2);
  auto r = std::make_unique<SchedulerRequest>();
  r->kv = Request(RequestId{1}, iota_tokens(4, 1));
  r->n = 2;
  EXPECT_THROW(h.scheduler.add_request(std::move(r)), UsageError);
  auto z = std::make_unique<SchedulerRequest>();
  z->kv = Request(RequestId{2}, iota_tokens(4, 1));
  z->stop.known_output_tokens = 0;
  EXPECT_THROW(h.scheduler.add_request(std::move(z)), UsageError);
}

TEST(SchedulerReservation, RandomStreamsKeepEveryPolicyConsistent) {
  for (KVReservation p : {KVReservation::kPaged, KVReservation::kMax, KVReservation::kPow2, KVReservation::kOracle}) {
    std::mt19937_64 rng(7);
    Harness h(65, 4, p, 16, 64);
    uint64_t id = 1;
    int added = 0;
    for (int s = 0; s < 400; ++s) {
      if (added < 60 && rng() % 3 == 0) {
        const int prompt = 1 + static_cast<int>(rng() % 40);
        h.add(id++, prompt, 120, 1 + static_cast<int>(rng() % 60));
        ++added;
      }
      h.step();
      if (p == KVReservation::kPaged) continue;
      // A reservation covers its sequence: nothing is ever preempted.
      EXPECT_EQ(h.scheduler.stats().preemptions_recompute, 0u);
    }
    while (h.scheduler.has_unfinished()) h.step();
    EXPECT_EQ(static_cast<int>(h.finished.size()), added) << kv_reservation_name(p);
    for (const SchedulerRequest* r : h.finished) {
      EXPECT_EQ(r->finish_reason, FinishReason::kStop) << kv_reservation_name(p);
      EXPECT_EQ(r->num_output_tokens(), r->stop.known_output_tokens);
    }
    EXPECT_EQ(h.scheduler.reserved_blocks_in_use(), 0);
  }
}

}  // namespace
}  // namespace pagedkv
