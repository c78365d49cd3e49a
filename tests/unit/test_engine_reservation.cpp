// The engine under each KV reservation policy: a reserved request's KV lives in a contiguous
// range of the same arena and is read by the same kernels through the same block tables, so
// greedy outputs must match the paged engine's token for token, with every checker passing
// after every step.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/random_model.h"

namespace pagedkv {
namespace {

std::map<uint64_t, std::vector<TokenId>> run(const Model& model, KVReservation policy, int num_blocks,
                                             RangeAllocation ranges = RangeAllocation::kFirstFit) {
  EngineConfig c;
  c.block_size = 8;
  c.num_blocks = num_blocks;
  c.swap_space_bytes = 0;
  c.enable_prefix_caching = policy == KVReservation::kPaged;
  c.scheduler.kv_reservation = policy;
  c.scheduler.range_allocation = ranges;
  c.scheduler.max_num_batched_tokens = 64;  // long prompts are chunked
  c.max_model_len = 256;
  c.check_invariants = true;
  LLMEngine engine(model, c);
  for (int i = 0; i < 12; ++i) {
    GenerationRequest g;
    for (int t = 0; t < 5 + 13 * i; ++t) g.prompt.push_back((7 * t + 31 * i) % 500 + 1);
    g.sampling.temperature = 0;
    g.stop.max_tokens = 256 - static_cast<int>(g.prompt.size());
    g.stop.known_output_tokens = 3 + (i * 17) % 40;
    engine.add_request(std::move(g));
  }
  std::map<uint64_t, std::vector<TokenId>> out;
  for (RequestOutput& o : engine.run_to_completion()) {
    EXPECT_EQ(o.finish_reason, FinishReason::kStop) << kv_reservation_name(policy);
    out[o.id.value] = o.output;
  }
  EXPECT_EQ(engine.scheduler().reserved_blocks_in_use(), 0);
  return out;
}

TEST(EngineReservation, EveryPolicyGeneratesWhatPagedGenerates) {
  const std::unique_ptr<Model> model = make_random_model(builtin_random_model_config(), 3);
  // 96 usable blocks of 8 = 768 slots: max reservations (256 tokens) fit only 3 at a time, so
  // requests queue for ranges and ranges are reused at different addresses.
  const auto paged = run(*model, KVReservation::kPaged, 97);
  ASSERT_EQ(paged.size(), 12u);
  for (KVReservation p : {KVReservation::kMax, KVReservation::kPow2, KVReservation::kOracle}) {
    EXPECT_EQ(run(*model, p, 97), paged) << kv_reservation_name(p);
    // Buddy ranges: power-of-two ranges (a max reservation of 32 blocks fits 3 aligned ones), the
    // table row cut at the longest sequence.
    EXPECT_EQ(run(*model, p, 97, RangeAllocation::kBuddy), paged) << kv_reservation_name(p) << " buddy";
  }
}

TEST(EngineReservation, BaselinesRejectParallelSamplingBeforeQueueingAnything) {
  const std::unique_ptr<Model> model = make_random_model(builtin_random_model_config(), 3);
  EngineConfig c;
  c.num_blocks = 32;
  c.scheduler.kv_reservation = KVReservation::kOracle;
  LLMEngine engine(*model, c);
  GenerationRequest g;
  g.prompt = {1, 2, 3};
  g.n = 2;
  EXPECT_THROW(engine.add_request(g), UsageError);
  EXPECT_FALSE(engine.has_unfinished());
  g.n = 1;
  g.stop.max_tokens = 4;
  engine.add_request(g);
  EXPECT_EQ(engine.run_to_completion().size(), 1u);
}

}  // namespace
}  // namespace pagedkv
