// The continuous-batching scheduler driven directly, with no model: each step's sampled tokens
// are made up by the test. The manager's invariant checker runs after every schedule() and
// update(), so a step that breaks the pool fails at that step.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "core_test_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/scheduler/scheduler.h"

namespace pagedkv {
namespace {

using testing::full_attention_config;
using testing::iota_tokens;

SchedulerConfig config(int max_seqs, int budget, PreemptionMode mode = PreemptionMode::kRecompute) {
  SchedulerConfig c;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget;
  c.preemption_mode = mode;
  c.swap_threshold_tokens = 0;
  // Admission is paused only when the pool is full, and resumes as soon as it is not.
  c.admit_high_watermark = 1.0;
  c.admit_low_watermark = 1.0;
  return c;
}

// A manager and a scheduler over it, with the checker after every call.
struct Harness {
  KVCacheManager manager;
  Scheduler scheduler;
  uint64_t next_token = 100000;  // sampled tokens never repeat: no accidental prefix sharing
  std::vector<SchedulerRequest*> finished;

  Harness(int num_blocks, int block_size, SchedulerConfig c, int swap_blocks = 0)
      : manager(full_attention_config(num_blocks, block_size)), scheduler(c, manager, swap_blocks) {}

  SchedulerRequest& add(uint64_t id, std::vector<TokenId> prompt, int priority = 0, int max_tokens = 1000) {
    auto r = std::make_unique<SchedulerRequest>();
    r->kv = Request(RequestId{id}, std::move(prompt));
    r->priority = priority;
    r->stop.max_tokens = max_tokens;
    return scheduler.add_request(std::move(r));
  }
  SchedulerOutput schedule() {
    SchedulerOutput out = scheduler.schedule();
    EXPECT_NO_THROW(manager.check_invariants()) << "after schedule() of step " << scheduler.stats().steps;
    EXPECT_NO_THROW(scheduler.check_invariants()) << "after schedule() of step " << scheduler.stats().steps;
    EXPECT_LE(out.num_batched_tokens, scheduler.config().max_num_batched_tokens);
    int sum = 0;
    for (const ScheduledChunk& c : out.chunks) sum += c.num_new_tokens;
    EXPECT_EQ(sum, out.num_batched_tokens);
    EXPECT_LE(static_cast<int>(out.chunks.size()), scheduler.config().max_num_seqs);
    EXPECT_LE(scheduler.num_running(), scheduler.config().max_num_seqs);
    return out;
  }
  void update(const SchedulerOutput& out) {
    std::vector<SampledTokens> sampled(out.chunks.size());
    for (SampledTokens& s : sampled) s.token = static_cast<TokenId>(next_token++);
    for (SchedulerRequest* r : scheduler.update(out, sampled)) finished.push_back(r);
    EXPECT_NO_THROW(manager.check_invariants()) << "after update() of step " << scheduler.stats().steps;
    EXPECT_NO_THROW(scheduler.check_invariants()) << "after update() of step " << scheduler.stats().steps;
  }
  SchedulerOutput step() {
    SchedulerOutput out = schedule();
    update(out);
    return out;
  }
  const ScheduledChunk* chunk_of(const SchedulerOutput& out, uint64_t id) const {
    for (const ScheduledChunk& c : out.chunks)
      if (c.request->kv.id.value == id) return &c;
    return nullptr;
  }
  int usable() const { return manager.pool().num_usable_blocks(); }
};

TEST(Scheduler, TokenBudgetAndRequestLimitPerStep) {
  Harness h(64, 4, config(3, 12));
  for (uint64_t i = 1; i <= 10; ++i) h.add(i, iota_tokens(5, static_cast<TokenId>(i * 1000)), 0, 4);
  int steps = 0;
  while (h.scheduler.has_unfinished() && steps < 100) {
    const SchedulerOutput out = h.step();  // the harness checks budget and limit on every step
    EXPECT_LE(out.chunks.size(), 3u);
    ++steps;
  }
  EXPECT_FALSE(h.scheduler.has_unfinished());
  EXPECT_EQ(h.finished.size(), 10u);
  // 10 prompts of 5 tokens with at most 3 running: at least 4 admission rounds.
  EXPECT_GE(steps, 4 * 4);
  EXPECT_EQ(h.manager.num_free_blocks(), h.usable());
}

TEST(Scheduler, FirstStepFillsTheBudgetAcrossRequests) {
  Harness h(64, 4, config(8, 12));
  for (uint64_t i = 1; i <= 4; ++i) h.add(i, iota_tokens(5, static_cast<TokenId>(i * 1000)));
  const SchedulerOutput out = h.step();
  // 5 + 5 fit; the third prompt gets the 2 tokens left (chunked); the fourth waits.
  ASSERT_EQ(out.chunks.size(), 3u);
  EXPECT_EQ(out.chunks[0].num_new_tokens, 5);
  EXPECT_EQ(out.chunks[1].num_new_tokens, 5);
  EXPECT_EQ(out.chunks[2].num_new_tokens, 2);
  EXPECT_FALSE(out.chunks[2].samples);
  EXPECT_EQ(out.num_batched_tokens, 12);
  EXPECT_EQ(h.scheduler.num_waiting(), 1);
}

TEST(Scheduler, ChunkedPrefillSpreadsALongPromptOverSteps) {
  Harness h(64, 4, config(4, 16));
  h.add(1, iota_tokens(50, 0), 0, 2);
  std::vector<int> firsts, sizes;
  std::vector<bool> samples;
  for (int s = 0; s < 4; ++s) {
    const SchedulerOutput out = h.step();
    ASSERT_EQ(out.chunks.size(), 1u);
    firsts.push_back(out.chunks[0].first_position);
    sizes.push_back(out.chunks[0].num_new_tokens);
    samples.push_back(out.chunks[0].samples);
  }
  EXPECT_EQ(firsts, (std::vector<int>{0, 16, 32, 48}));
  EXPECT_EQ(sizes, (std::vector<int>{16, 16, 16, 2}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, false, true}));  // only the last chunk samples
  // Then one decode token per step.
  const SchedulerOutput out = h.step();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].num_new_tokens, 1);
  EXPECT_EQ(out.chunks[0].first_position, 50);
  EXPECT_FALSE(h.scheduler.has_unfinished());  // max_tokens 2
}

TEST(Scheduler, RunningFirstThenWaitingWithTheirPrefixHit) {
  Harness h(64, 4, config(4, 64));
  const auto system = iota_tokens(8, 500);  // two full blocks
  h.add(1, testing::concat(system, iota_tokens(3, 1)), 0, 3);
  h.step();  // prefill of 1: its two system blocks are cached
  h.add(2, testing::concat(system, iota_tokens(5, 2000)));
  const SchedulerOutput out = h.step();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].request->kv.id.value, 1u) << "running requests are scheduled first";
  EXPECT_EQ(out.chunks[0].num_new_tokens, 1);
  EXPECT_EQ(out.chunks[1].request->kv.id.value, 2u);
  EXPECT_EQ(out.chunks[1].first_position, 8) << "the admitted request starts after its prefix hit";
  EXPECT_EQ(out.chunks[1].num_new_tokens, 5);
  EXPECT_EQ(h.scheduler.find(RequestId{2})->prefix_hit_tokens, 8);
  EXPECT_EQ(h.scheduler.find(RequestId{2})->hit_tokens_by_tier, (TierHitTokens{8, 0, 0}));
}

TEST(Scheduler, WaitingRequestsAreAdmittedInPriorityOrder) {
  Harness h(64, 4, config(1, 64));
  h.add(1, iota_tokens(3, 10), 2, 1);
  h.add(2, iota_tokens(3, 20), 0, 1);
  h.add(3, iota_tokens(3, 30), 1, 1);
  h.add(4, iota_tokens(3, 40), 0, 1);  // same priority as 2: arrival order
  std::vector<uint64_t> order;
  while (h.scheduler.has_unfinished()) {
    const SchedulerOutput out = h.step();
    for (const ScheduledChunk& c : out.chunks) order.push_back(c.request->kv.id.value);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 4, 3, 1}));
}

// Two running requests decode until the pool runs out; returns the one preempted.
uint64_t first_victim(int priority_a, int priority_b) {
  Harness h(5, 4, config(4, 64));  // 4 usable blocks
  h.add(1, iota_tokens(7, 100), priority_a);
  h.add(2, iota_tokens(7, 200), priority_b);
  h.step();  // both admitted (A first when priorities tie), 2 blocks each; the pool is full
  for (int s = 0; s < 4; ++s) {
    const SchedulerOutput out = h.step();
    if (out.num_preempted_recompute > 0) {
      EXPECT_EQ(out.num_preempted_recompute, 1);
      for (uint64_t id : {1u, 2u})
        if (h.scheduler.find(RequestId{id})->num_preemptions > 0) return id;
    }
  }
  ADD_FAILURE() << "no preemption";
  return 0;
}

TEST(Scheduler, VictimIsTheLowestPriorityThenTheMostRecentlyAdmitted) {
  EXPECT_EQ(first_victim(0, 0), 2u) << "equal priority: the most recently admitted";
  EXPECT_EQ(first_victim(1, 0), 1u) << "the lowest priority (largest value), though admitted first";
  EXPECT_EQ(first_victim(0, 1), 2u);
}

TEST(Scheduler, AdmissionHysteresisDoesNotOscillate) {
  SchedulerConfig c = config(16, 256);
  c.admit_high_watermark = 0.5;
  c.admit_low_watermark = 0.25;
  Harness h(17, 4, c);  // 16 usable blocks: pause at 8 in use, resume at 4
  // 5-token prompts: 2 blocks each, and no new block until decode position 8 (step 5).
  for (uint64_t i = 1; i <= 5; ++i) h.add(i, iota_tokens(5, static_cast<TokenId>(i * 100)));
  h.step();  // usage was 0 when admission started: all 5 admitted, 10 blocks
  EXPECT_EQ(h.scheduler.num_running(), 5);
  for (uint64_t i = 6; i <= 9; ++i) h.add(i, iota_tokens(3, static_cast<TokenId>(i * 100)));
  h.step();
  EXPECT_EQ(h.scheduler.num_running(), 5) << "usage 10/16 >= 0.5: admission paused";
  EXPECT_EQ(h.scheduler.stats().admission_pauses, 1u);
  ASSERT_TRUE(h.scheduler.abort_request(RequestId{1}));
  h.step();  // 8/16: at the high mark, still paused
  EXPECT_EQ(h.scheduler.num_waiting(), 4);
  ASSERT_TRUE(h.scheduler.abort_request(RequestId{2}));
  h.step();  // 6/16: below the high mark but above the low one: still paused
  EXPECT_EQ(h.scheduler.num_waiting(), 4);
  EXPECT_EQ(h.scheduler.num_running(), 3);
  for (uint64_t i : {3u, 4u}) ASSERT_TRUE(h.scheduler.abort_request(RequestId{i}));
  h.step();  // 5 grows to 3 blocks: 3/16 <= 0.25, admission resumes and takes all four
  EXPECT_EQ(h.scheduler.num_waiting(), 0);
  EXPECT_EQ(h.scheduler.num_running(), 5);
  EXPECT_EQ(h.scheduler.stats().admissions, 9u);
  h.step();  // 7/16: between the marks while admitting: no new pause
  EXPECT_EQ(h.scheduler.stats().admission_pauses, 1u) << "one pause, not one per step";
}

TEST(Scheduler, AbortFreesBlocksAtOnceEvenMidPrefill) {
  Harness h(64, 4, config(4, 8));
  h.add(1, iota_tokens(40, 0));
  h.step();
  h.step();  // 16 of 40 prompt tokens computed: mid-prefill
  ASSERT_EQ(h.scheduler.find(RequestId{1})->kv.num_computed_tokens, 16);
  ASSERT_LT(h.manager.num_free_blocks(), h.usable());
  ASSERT_TRUE(h.scheduler.abort_request(RequestId{1}));
  EXPECT_EQ(h.manager.num_free_blocks(), h.usable()) << "freed at the abort, not at the next step";
  EXPECT_FALSE(h.manager.has_request(RequestId{1}));
  EXPECT_NO_THROW(h.manager.check_invariants());
  EXPECT_FALSE(h.scheduler.abort_request(RequestId{1})) << "a second abort finds nothing";
  const SchedulerOutput out = h.step();
  EXPECT_TRUE(out.chunks.empty());
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0]->finish_reason, FinishReason::kAborted);
}

TEST(Scheduler, AbortOfAWaitingOrSwappedRequestLeavesThePoolAsItWas) {
  Harness h(5, 4, config(4, 64, PreemptionMode::kSwap), 8);
  h.add(1, iota_tokens(7, 100));
  h.add(2, iota_tokens(7, 200));
  h.add(3, iota_tokens(7, 300));  // waits: no room
  while (h.scheduler.num_swapped() == 0) h.step();
  ASSERT_EQ(h.scheduler.swap_space().num_free(), 6);
  ASSERT_TRUE(h.scheduler.abort_request(RequestId{2}));
  EXPECT_EQ(h.scheduler.swap_space().num_free(), 8) << "an aborted swapped request frees its host slots";
  EXPECT_EQ(h.scheduler.stats().blocks_swap_dropped, 2u);
  ASSERT_TRUE(h.scheduler.abort_request(RequestId{3}));
  ASSERT_TRUE(h.scheduler.abort_request(RequestId{1}));
  EXPECT_EQ(h.manager.num_free_blocks(), h.usable());
  EXPECT_FALSE(h.scheduler.has_unfinished());
}

TEST(Scheduler, SwappedRequestsResumeBeforeNewAdmissions) {
  Harness h(5, 4, config(4, 64, PreemptionMode::kSwap), 8);  // 4 usable device blocks
  h.add(1, iota_tokens(7, 100), 0, 4);
  h.add(2, iota_tokens(7, 200), 0, 100);
  h.step();  // both prefilled: 2 blocks each
  int preempt_step = -1;
  for (int s = 0; s < 4 && preempt_step < 0; ++s)
    if (h.step().num_preempted_swap > 0) preempt_step = s;
  ASSERT_GE(preempt_step, 0);
  ASSERT_EQ(h.scheduler.num_swapped(), 1);
  const SchedulerRequest* victim = h.scheduler.find(RequestId{2});
  EXPECT_EQ(victim->status, RequestStatus::kSwapped);
  EXPECT_EQ(h.scheduler.stats().blocks_swapped_out, 2u);
  // A small newcomer that would fit in the free block must not jump the queue.
  h.add(3, iota_tokens(3, 300), 0, 2);
  bool newcomer_waited_while_swapped = false;
  std::vector<uint64_t> resume_order;
  for (int s = 0; s < 20 && h.scheduler.has_unfinished(); ++s) {
    const bool swapped_before = h.scheduler.num_swapped() > 0;
    const SchedulerOutput out = h.schedule();
    for (RequestId id : out.rewritten_tables)
      if (id.value != 1 && std::find(resume_order.begin(), resume_order.end(), id.value) == resume_order.end())
        resume_order.push_back(id.value);
    if (h.scheduler.num_swapped() > 0) {
      EXPECT_EQ(h.scheduler.find(RequestId{3})->status, RequestStatus::kWaiting);
      newcomer_waited_while_swapped = swapped_before;
    }
    h.update(out);
  }
  EXPECT_TRUE(newcomer_waited_while_swapped);
  EXPECT_EQ(resume_order, (std::vector<uint64_t>{2, 3})) << "the swapped request resumes first";
  // Every swapped block is accounted for: copied back, found in the prefix cache, or dropped.
  const SchedulerStats& st = h.scheduler.stats();
  EXPECT_EQ(h.scheduler.swapped_blocks(), 0u);
  EXPECT_EQ(st.blocks_swapped_out, st.blocks_swapped_in + st.blocks_swap_resumed_from_cache + st.blocks_swap_dropped);
  EXPECT_EQ(h.scheduler.swap_space().num_free(), 8) << "no host slot leaks";
}

TEST(Scheduler, SwapAccountingCountsBlocksStillInThePrefixCache) {
  // The victim's full blocks stay cached-free in the device pool after it is swapped out; when
  // nothing evicts them, it resumes from the cache and nothing is copied back.
  Harness h(8, 4, config(4, 64, PreemptionMode::kSwap), 8);  // 7 usable
  h.add(1, iota_tokens(8, 100), 0, 100);  // 3 blocks once decoding
  h.add(2, iota_tokens(8, 200), 0, 100);
  h.step();
  h.step();
  int guard = 0;
  while (h.scheduler.num_swapped() == 0 && ++guard < 20) h.step();
  ASSERT_EQ(h.scheduler.num_swapped(), 1);
  const uint64_t out_blocks = h.scheduler.stats().blocks_swapped_out;
  EXPECT_EQ(h.scheduler.swapped_blocks(), out_blocks);
  ASSERT_TRUE(h.scheduler.abort_request(RequestId{1}));  // room to resume, with nothing evicted
  const SchedulerOutput out = h.step();
  EXPECT_EQ(h.scheduler.num_swapped(), 0);
  const SchedulerStats& st = h.scheduler.stats();
  EXPECT_EQ(st.blocks_swapped_out, st.blocks_swapped_in + st.blocks_swap_resumed_from_cache + st.blocks_swap_dropped);
  EXPECT_GT(st.blocks_swap_resumed_from_cache, 0u);
  EXPECT_EQ(out.swap_in.size(), st.blocks_swapped_in);
  EXPECT_EQ(h.scheduler.swap_space().num_free(), 8);
}

// A model of the KV bytes: each device and host slot holds the token whose KV it stores. run()
// performs a step's byte movements in the engine's order (swap-out, swap-in, copy-on-write),
// checks that every scheduled chunk's context holds its own tokens, then "computes" the chunk.
struct KvModel {
  int block_size;
  std::vector<std::vector<TokenId>> device, host;
  KvModel(int device_blocks, int host_blocks, int bs)
      : block_size(bs),
        device(static_cast<size_t>(device_blocks), std::vector<TokenId>(static_cast<size_t>(bs), -1)),
        host(static_cast<size_t>(host_blocks), std::vector<TokenId>(static_cast<size_t>(bs), -1)) {}
  TokenId& at(std::span<const BlockId> table, int position) {
    return device[static_cast<size_t>(table[static_cast<size_t>(position / block_size)].value)]
                 [static_cast<size_t>(position % block_size)];
  }
  void run(const SchedulerOutput& out, const KVCacheManager& manager) {
    for (const auto& [d, h] : out.swap_out) host[static_cast<size_t>(h.value)] = device[static_cast<size_t>(d.value)];
    for (const auto& [h, d] : out.swap_in) device[static_cast<size_t>(d.value)] = host[static_cast<size_t>(h.value)];
    for (const auto& [src, dst] : out.cow_copies)
      device[static_cast<size_t>(dst.value)] = device[static_cast<size_t>(src.value)];
    for (const ScheduledChunk& c : out.chunks) {
      const auto table = manager.get_block_ids(c.request->kv);
      const auto& tokens = c.request->kv.tokens;
      for (int p = 0; p < c.first_position; ++p)
        ASSERT_EQ(at(table, p), tokens[static_cast<size_t>(p)])
            << "request " << c.request->kv.id.value << " position " << p << ": its KV was lost";
      for (int p = c.first_position; p < c.first_position + c.num_new_tokens; ++p)
        at(table, p) = tokens[static_cast<size_t>(p)];
    }
  }
};

// Swap preemption under pressure, with prefix sharing, through the KV model: every resumed
// request finds its own KV, with copies made at swap-out (eager) or only when the device cache
// drops a block (lazy), and lazy makes fewer copies.
TEST(Scheduler, SwappedKVComesBackWithEagerAndLazyCopies) {
  uint64_t copies[2] = {0, 0};
  for (const bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy swap copies" : "eager swap copies");
    SchedulerConfig c = config(6, 32, PreemptionMode::kSwap);
    c.lazy_swap_copies = lazy;
    constexpr int kBlocks = 14, kHostBlocks = 64, kBlockSize = 4;
    Harness h(kBlocks, kBlockSize, c, kHostBlocks);
    KvModel kv(kBlocks, kHostBlocks, kBlockSize);
    const std::vector<TokenId> shared = iota_tokens(8, 7000);  // a common 2-block prefix
    for (uint64_t i = 1; i <= 12; ++i) {
      std::vector<TokenId> prompt = shared;
      const auto own = iota_tokens(static_cast<int>(3 + i % 5), static_cast<TokenId>(i * 100));
      prompt.insert(prompt.end(), own.begin(), own.end());
      h.add(i, prompt, static_cast<int>(i % 3), static_cast<int>(6 + (i * 7) % 13));
    }
    for (int s = 0; s < 400 && h.scheduler.has_unfinished(); ++s) {
      const SchedulerOutput out = h.schedule();
      copies[lazy] += out.swap_out.size();
      kv.run(out, h.manager);
      if (::testing::Test::HasFatalFailure()) return;
      h.update(out);
    }
    EXPECT_FALSE(h.scheduler.has_unfinished());
    const SchedulerStats& st = h.scheduler.stats();
    EXPECT_GT(st.preemptions_swap, 0u);
    EXPECT_EQ(st.blocks_swapped_out, st.blocks_swapped_in + st.blocks_swap_resumed_from_cache + st.blocks_swap_dropped);
    EXPECT_EQ(copies[lazy], st.blocks_swapped_out - st.blocks_swap_copies_skipped);
    if (lazy) {
      EXPECT_GT(st.blocks_swap_copies_deferred, 0u);
    } else {
      EXPECT_EQ(st.blocks_swap_copies_deferred, 0u);
    }
    EXPECT_EQ(h.scheduler.swap_space().num_free(), kHostBlocks) << "no host slot leaks";
  }
  EXPECT_LT(copies[1], copies[0]);
}

// Lazy swap copies made due between steps (a prefix-cache reset drops the victim's deferred
// blocks) are not emitted once the victim is aborted: its host blocks may be handed out again.
TEST(Scheduler, LazySwapCopiesOfAnAbortedVictimAreDropped) {
  SchedulerConfig c = config(4, 64, PreemptionMode::kSwap);
  c.lazy_swap_copies = true;
  Harness h(8, 4, c, 8);  // 7 usable
  h.add(1, iota_tokens(8, 100), 0, 100);
  h.add(2, iota_tokens(8, 200), 0, 100);
  int guard = 0;
  while (h.scheduler.num_swapped() == 0 && ++guard < 20) h.step();
  ASSERT_EQ(h.scheduler.num_swapped(), 1);
  ASSERT_GT(h.scheduler.stats().blocks_swap_copies_deferred, 0u);
  const SchedulerRequest* victim = h.scheduler.find(RequestId{2})->status == RequestStatus::kSwapped
                                       ? h.scheduler.find(RequestId{2})
                                       : h.scheduler.find(RequestId{1});
  const std::vector<BlockId> host_blocks = victim->host_blocks;
  const RequestId victim_id = victim->kv.id;
  (void)h.manager.reset_prefix_cache();  // the deferred copies are due now
  ASSERT_TRUE(h.scheduler.abort_request(victim_id));
  const SchedulerOutput out = h.step();
  for (const auto& [device, host] : out.swap_out)
    EXPECT_EQ(std::find(host_blocks.begin(), host_blocks.end(), host), host_blocks.end())
        << "a copy into host block " << host.value << " of the aborted victim";
  EXPECT_EQ(h.scheduler.swap_space().num_free(), 8);
}

// fbb1797: A (low priority) decodes the token that completes its block, which allocate_slots
// caches at once; B, scheduled after it in the same step, needs a block and preempts A. A's
// token is never computed, so its block must leave the prefix cache as invalidated. Kept cached,
// the block is at the front of the free queue and B's allocation evicts it as if it held KV:
// the pool's uncache listener (the KV tiers offload evicted blocks there) would report it as
// evicted content, KV that was never written.
TEST(Scheduler, VictimPreemptedAfterItsChunkLeavesNoUncomputedBlockCached) {
  Harness h(6, 2, config(4, 64));  // 5 usable blocks of 2 tokens
  std::vector<std::vector<TokenId>> evicted;
  h.manager.pool().set_uncache_listener([&](const KVCacheBlock& b, RemovalReason why) {
    if (why != RemovalReason::kEvicted) return;  // invalidating it is the fix
    const auto t = h.manager.pool().cached_tokens(b.id);
    evicted.emplace_back(t.begin(), t.end());
  });
  h.add(1, iota_tokens(3, 100), /*priority=*/1);
  h.step();  // A: 3 prompt tokens computed, 4 tokens, 2 blocks
  h.add(2, iota_tokens(3, 200), /*priority=*/0);
  h.step();  // A decodes position 3; B admitted (2 blocks)
  h.step();  // A position 4 (a third block), B position 3
  SchedulerRequest* a = h.scheduler.find(RequestId{1});
  ASSERT_EQ(a->kv.num_computed_tokens, 5);
  ASSERT_EQ(a->kv.num_tokens(), 6);
  ASSERT_EQ(h.manager.num_free_blocks(), 0);
  const std::vector<TokenId> a_tokens = a->kv.tokens;
  const std::vector<TokenId> uncomputed_block(a_tokens.begin() + 4, a_tokens.end());
  // A's chunk (position 5) completes its third block; B (position 4) needs a new block: A is
  // preempted after its chunk was scheduled.
  const SchedulerOutput out = h.schedule();
  ASSERT_EQ(out.num_preempted_recompute, 1);
  EXPECT_EQ(a->status, RequestStatus::kWaiting);
  EXPECT_EQ(h.chunk_of(out, 1), nullptr);
  ASSERT_NE(h.chunk_of(out, 2), nullptr);
  EXPECT_EQ(std::count(evicted.begin(), evicted.end(), uncomputed_block), 0)
      << "a block whose last token was never computed was evicted as cached content";
  h.update(out);
  // A request extending A's tokens finds only what was computed: A's first two blocks.
  Request probe(RequestId{99}, a_tokens);
  probe.append_token(7);
  EXPECT_EQ(h.manager.get_computed_blocks(probe).num_computed_tokens, 4);
  for (int s = 0; s < 3; ++s) h.step();
  EXPECT_EQ(std::count(evicted.begin(), evicted.end(), uncomputed_block), 0);
}

TEST(Scheduler, RejectsRequestsLargerThanThePoolAndBadInput) {
  Harness h(5, 4, config(4, 64));
  h.add(1, iota_tokens(40, 0));
  const SchedulerOutput out = h.step();
  EXPECT_TRUE(out.chunks.empty());
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0]->finish_reason, FinishReason::kRejected);
  EXPECT_THROW(h.add(2, {}), UsageError);
  h.add(3, iota_tokens(2, 0));
  EXPECT_THROW(h.add(3, iota_tokens(2, 0)), UsageError);
  EXPECT_THROW(h.scheduler.update(h.scheduler.schedule(), {}), UsageError);
  SchedulerConfig bad = config(4, 64);
  bad.admit_low_watermark = 0.9;
  bad.admit_high_watermark = 0.5;
  EXPECT_THROW(bad.validate(), ConfigError);
}

}  // namespace
}  // namespace pagedkv
