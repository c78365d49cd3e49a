// KV-cache specs beyond full attention: sliding window (blocks wholly outside the window are
// released and their table entries point at the null block; prefix hits need only the window)
// and cross-attention (a fixed number of encoder blocks per request, allocated once, never
// cached), alone and mixed with a full-attention group. Every operation runs the checker.
#include <gtest/gtest.h>

#include <algorithm>

#include "core_test_support.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

using testing::CheckedManager;
using testing::concat;
using testing::iota_tokens;

using Ids = std::vector<int32_t>;

KVCacheGroupSpec group(AttentionKind kind, int block_size, int window = 0) {
  KVCacheGroupSpec g;
  g.spec.kind = kind;
  g.spec.block_size = block_size;
  g.spec.sliding_window = window;
  return g;
}

KVCacheManagerConfig config(int num_blocks, std::vector<KVCacheGroupSpec> groups, int max_model_len = 0,
                            bool retention = true) {
  KVCacheManagerConfig c;
  c.sliding_window_retention = retention;
  c.cache.num_blocks = num_blocks;
  c.cache.groups = std::move(groups);
  c.watermark = 0.0;
  c.max_model_len = max_model_len;
  return c;
}

int non_null(const Ids& t) {
  return static_cast<int>(std::count_if(t.begin(), t.end(), [](int32_t b) { return b != 0; }));
}

// ---- sliding window --------------------------------------------------------------------------

TEST(CoreSpecs, SlidingWindowReleasesBlocksThatLeftTheWindow) {
  // Block size 4, window 8: a token attends to itself and the 7 before it. Retention off: every
  // released block keeps its content at the back of the free queue (vLLM before #43447).
  CheckedManager m(config(32, {group(AttentionKind::kSlidingWindow, 4, 8)}, 0, /*retention=*/false));
  Request r(RequestId{1}, iota_tokens(20, 0));
  ASSERT_TRUE(m.admit(r).has_value());
  const Ids prefill = m.table(r);
  ASSERT_EQ(prefill.size(), 5u) << "the prompt is allocated whole";
  ASSERT_EQ(m->num_free_blocks(), 31 - 5);
  // Next step: the token at position 20 attends to 13..20, so blocks 0..2 (tokens 0..11) are
  // never read again: released, and their entries now point at the null block.
  auto got = m.decode(r, 500);
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->table_rewritten);
  const Ids after = m.table(r);
  ASSERT_EQ(after.size(), 6u);
  EXPECT_EQ(Ids(after.begin(), after.begin() + 3), (Ids{0, 0, 0}));
  EXPECT_EQ(after[3], prefill[3]);
  EXPECT_EQ(after[4], prefill[4]);
  EXPECT_EQ(got->blocks[0].size(), 1u);
  EXPECT_EQ(m->num_free_blocks(), 31 - 3) << "three released, one new";
  for (int i = 0; i < 3; ++i) {
    const KVCacheBlock& b = m->pool().block(BlockId{prefill[static_cast<size_t>(i)]});
    EXPECT_EQ(b.ref_cnt, 0);
    EXPECT_TRUE(b.in_free_queue);
    EXPECT_TRUE(b.has_hash) << "released blocks keep their cached content until reused";
  }
  EXPECT_EQ(m->pool().block(m->pool().null_block()).ref_cnt, 0) << "null entries hold no reference";
}

TEST(CoreSpecs, SlidingWindowRetentionDropsBlocksNoLookupCanReachToTheFront) {
  // Retention on (the default): of a 20-token prompt only the windows before its aligned end
  // (blocks 3, 4: tokens 13..19 for a hit at 20) and before its last block (blocks 2, 3: a
  // repeat of the prompt hits at 16) are cached; blocks 0 and 1 are never hashed, and when
  // they leave the window they go to the front of the free queue.
  CheckedManager m(config(32, {group(AttentionKind::kSlidingWindow, 4, 8)}));
  Request r(RequestId{1}, iota_tokens(20, 0));
  ASSERT_TRUE(m.admit(r).has_value());
  const Ids prefill = m.table(r);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(m->pool().block(BlockId{prefill[static_cast<size_t>(i)]}).has_hash, i >= 2) << "block " << i;
    EXPECT_EQ(m->pool().block(BlockId{prefill[static_cast<size_t>(i)]}).window_checkpoint, i >= 2) << "block " << i;
  }
  auto got = m.decode(r, 500);
  ASSERT_TRUE(got.has_value());
  const Ids after = m.table(r);
  EXPECT_EQ(Ids(after.begin(), after.begin() + 3), (Ids{0, 0, 0}));
  // Blocks 0 and 1 went to the front; the new block is one of them, reused at once.
  EXPECT_EQ(after[5], prefill[0]);
  EXPECT_EQ(testing::free_order(m->pool()).front(), prefill[1]);
  EXPECT_EQ(testing::free_order(m->pool()).back(), prefill[2]) << "the checkpoint joins the back, cached";
  EXPECT_TRUE(m->pool().block(BlockId{prefill[2]}).has_hash);
  EXPECT_EQ(m->pool().stats().window_blocks_slid_out, 2u);
  EXPECT_EQ(m->pool().stats().window_checkpoints_retained, 1u);
  // Freed, the request leaves its last window cached as a checkpoint at the back.
  m.free(r);
  EXPECT_EQ(m->pool().stats().window_checkpoints_retained, 3u) << "blocks 3 and 4 (the window before 20)";
  EXPECT_EQ(testing::free_order(m->pool()).back(), prefill[3]) << "tail first: block 3 is freed last";
  EXPECT_EQ(testing::free_order(m->pool()).front(), after[5]) << "the partial last block is worthless: front";
}

TEST(CoreSpecs, SlidingWindowCheckpointIntervalKeepsWindowsEveryNTokens) {
  // Interval 16 tokens: hit points 16, 32 besides the prompt end 40 (window 8, block 4: the 2
  // blocks before each point).
  KVCacheManagerConfig c = config(64, {group(AttentionKind::kSlidingWindow, 4, 8)});
  c.sliding_window_checkpoint_interval = 16;
  CheckedManager m(std::move(c));
  Request a(RequestId{1}, iota_tokens(41, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  const Ids t = m.table(a);
  const std::vector<int> cached = {2, 3, 6, 7, 8, 9};  // before 16, 32 and 40 (block 9: the end window)
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(m->pool().block(BlockId{t[static_cast<size_t>(i)]}).has_hash,
              std::find(cached.begin(), cached.end(), i) != cached.end())
        << "block " << i;
  m.free(a);
  // A request sharing only the first 33 tokens hits at 32: the interval checkpoint.
  Request b(RequestId{2}, concat(iota_tokens(33, 0), {999, 998}));
  EXPECT_EQ(m.get_computed_blocks(b).num_computed_tokens, 32);
  Request c2(RequestId{3}, concat(iota_tokens(30, 0), {999}));
  EXPECT_EQ(m.get_computed_blocks(c2).num_computed_tokens, 16);
  EXPECT_THROW(([] {
                 KVCacheManagerConfig bad = config(64, {group(AttentionKind::kSlidingWindow, 4, 8)});
                 bad.sliding_window_checkpoint_interval = 6;
                 KVCacheManager x(std::move(bad));
               }()),
               ConfigError);
}

TEST(CoreSpecs, SlidingWindowMemoryStaysBoundedDuringALongDecode) {
  constexpr int kBlock = 4, kWindow = 8;
  // A sequence far longer than the pool could hold with full attention.
  CheckedManager m(config(16, {group(AttentionKind::kSlidingWindow, kBlock, kWindow)}, /*max_model_len=*/1024));
  Request r(RequestId{1}, iota_tokens(6, 0));
  ASSERT_TRUE(m.admit(r).has_value());
  for (int step = 0; step < 200; ++step) {
    ASSERT_TRUE(m.decode(r, 1000 + step).has_value()) << "step " << step;
    EXPECT_LE(non_null(m.table(r)), (kWindow - 1 + kBlock - 1) / kBlock + 1) << "step " << step;
  }
  EXPECT_EQ(static_cast<int>(m.table(r).size()), (206 + kBlock - 1) / kBlock);
  m.free(r);
  EXPECT_EQ(m->num_free_blocks(), 15) << "freeing a table full of null entries frees only real blocks";
}

TEST(CoreSpecs, SlidingWindowHitNeedsOnlyTheBlocksInsideTheWindow) {
  CheckedManager m(config(32, {group(AttentionKind::kSlidingWindow, 4, 8)}));
  Request a(RequestId{1}, iota_tokens(20, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  const Ids a_table = m.table(a);
  m.free(a);  // A's window blocks stay cached in the free queue
  Request b(RequestId{2}, concat(iota_tokens(20, 0), {77}));
  ComputedBlocks hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.num_computed_tokens, 20);
  // The window of position 20 needs ceil((8 - 1) / 4) = 2 cached blocks before it: blocks 3, 4.
  // Everything before is the null block, held by nobody.
  EXPECT_EQ(testing::ids_of(hit.blocks[0]), (Ids{0, 0, 0, a_table[3], a_table[4]}));
  auto got = m.allocate_slots(b, 1, hit.num_computed_tokens, &hit);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(m->pool().block(BlockId{a_table[3]}).ref_cnt, 1);
  EXPECT_EQ(m.table(b)[5], a_table[0]) << "B's new block is one A dropped to the front";
  EXPECT_EQ(m->pool().block(BlockId{a_table[1]}).ref_cnt, 0) << "out-of-window blocks are not touched";
  EXPECT_EQ(m->num_free_blocks(), 31 - 3);
}

TEST(CoreSpecs, SlidingWindowHitNeedsAContiguousRunOfWindowBlocks) {
  // Retention off, so that every block is cached and evicted in LRU order.
  CheckedManager m(config(12, {group(AttentionKind::kSlidingWindow, 4, 8)}, 0, /*retention=*/false));
  Request a(RequestId{1}, iota_tokens(20, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  const Ids a_table = m.table(a);
  m.free(a);  // free queue: 6..11, then A's 5 4 3 2 1
  // 8 fresh blocks evict A's blocks 5 and 4 (its table entries 4 and 3, the window blocks).
  Request filler(RequestId{2}, iota_tokens(32, 900));
  ASSERT_TRUE(m.admit(filler).has_value());
  Request b(RequestId{3}, concat(iota_tokens(20, 0), {77}));
  ComputedBlocks hit = m.get_computed_blocks(b);
  // Blocks 0..2 are still cached: 12 tokens, and the window of position 12 (blocks 1, 2) is there.
  EXPECT_EQ(hit.num_computed_tokens, 12);
  EXPECT_EQ(testing::ids_of(hit.blocks[0]), (Ids{0, a_table[1], a_table[2]}));
}

TEST(CoreSpecs, SlidingWindowRetentionKeepsTheCheckpointWhereLruLostIt) {
  // The same pool and filler with retention on: A's unreachable blocks 0..2 are at the front,
  // so the filler takes them and the checkpoint (blocks 3, 4) survives: a hit at 20, not 12.
  CheckedManager m(config(12, {group(AttentionKind::kSlidingWindow, 4, 8)}));
  Request a(RequestId{1}, iota_tokens(20, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  m.free(a);
  Request filler(RequestId{2}, iota_tokens(32, 900));
  ASSERT_TRUE(m.admit(filler).has_value());
  Request b(RequestId{3}, concat(iota_tokens(20, 0), {77}));
  EXPECT_EQ(m.get_computed_blocks(b).num_computed_tokens, 20);
  EXPECT_EQ(m->pool().stats().window_checkpoints_evicted, 0u);
}

TEST(CoreSpecs, SlidingWindowAdmissionFitsWhenAnEmptyCacheCouldHoldIt) {
  // can_allocate's LATER means "fits once others finish". With nothing else running and nothing
  // cached, a request either fits (OK) or never will (NEVER); LATER would make a scheduler wait
  // forever. The whole prompt is allocated at admission (blocks leave the window only on the
  // next step), so a prompt longer than the pool can never be admitted whole.
  CheckedManager m(config(9, {group(AttentionKind::kSlidingWindow, 4, 8)}, /*max_model_len=*/1024));  // 8 usable
  Request fits(RequestId{1}, iota_tokens(32, 0));  // 8 blocks
  Request long_prompt(RequestId{2}, iota_tokens(60, 100));  // 15 blocks, window of 2-3
  EXPECT_EQ(m.can_allocate(fits), AllocStatus::kOk);
  const AllocStatus s = m.can_allocate(long_prompt);
  EXPECT_NE(s, AllocStatus::kLater) << "an empty cache cannot be waited on";
  EXPECT_FALSE(m.admit(long_prompt).has_value());
  EXPECT_EQ(s, AllocStatus::kNever);
}

// ---- cross attention -------------------------------------------------------------------------

KVCacheManagerConfig encoder_decoder(int num_blocks) {
  return config(num_blocks, {group(AttentionKind::kFull, 4), group(AttentionKind::kCrossAttention, 4)});
}

TEST(CoreSpecs, CrossAttentionBlocksAreAllocatedOnceAndNeverCached) {
  CheckedManager m(encoder_decoder(32));
  Request r(RequestId{1}, iota_tokens(5, 0));
  r.num_encoder_tokens = 10;  // 3 encoder blocks
  auto got = m.allocate_slots(r, 5);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->num_groups, 2);
  EXPECT_EQ(got->blocks[0].size(), 2u);
  EXPECT_EQ(got->blocks[1].size(), 3u);
  EXPECT_EQ(m.table(r, 1).size(), 3u);
  r.num_computed_tokens = 5;
  const Ids encoder = m.table(r, 1);
  for (int step = 0; step < 12; ++step) {
    auto d = m.decode(r, 100 + step);
    ASSERT_TRUE(d.has_value());
    EXPECT_TRUE(d->blocks[1].empty()) << "the encoder output does not grow";
  }
  EXPECT_EQ(m.table(r, 1), encoder);
  for (int32_t b : encoder)
    EXPECT_FALSE(m->pool().block(BlockId{b}).has_hash) << "cross-attention blocks are never cached";
  EXPECT_EQ(m->pool().num_cached_blocks(), 4) << "the decoder's 17 tokens: 4 full blocks";
  m.free(r);
  EXPECT_EQ(m->num_free_blocks(), 31);
}

TEST(CoreSpecs, CrossAttentionRequestsShareTheDecoderPrefixButNotTheEncoderOutput) {
  CheckedManager m(encoder_decoder(32));
  Request a(RequestId{1}, iota_tokens(9, 0));
  a.num_encoder_tokens = 8;
  Request b(RequestId{2}, iota_tokens(9, 0));
  b.num_encoder_tokens = 8;
  ASSERT_TRUE(m.admit(a).has_value());
  auto hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.num_computed_tokens, 8);
  EXPECT_TRUE(hit.blocks[1].empty()) << "no prefix hits for cross-attention";
  auto got = m.allocate_slots(b, 1, hit.num_computed_tokens, &hit);
  ASSERT_TRUE(got.has_value());
  b.num_computed_tokens = 9;
  const Ids ea = m.table(a, 1), eb = m.table(b, 1);
  for (int32_t x : ea)
    for (int32_t y : eb) EXPECT_NE(x, y);
  EXPECT_EQ(m->get_num_blocks_to_allocate(b, 10), 0) << "encoder blocks are not counted again";
}

TEST(CoreSpecs, CrossAttentionBlocksCountInAdmission) {
  CheckedManager m(encoder_decoder(9));  // 8 usable
  Request r(RequestId{1}, iota_tokens(8, 0));  // 2 decoder blocks
  r.num_encoder_tokens = 24;  // 6 encoder blocks
  EXPECT_EQ(m.can_allocate(r), AllocStatus::kOk);
  r.num_encoder_tokens = 28;  // 7: 9 in all
  EXPECT_EQ(m.can_allocate(r), AllocStatus::kNever);
  EXPECT_FALSE(m.admit(r).has_value());
}

// ---- a full-attention group beside a sliding-window group (hybrid models) --------------------

TEST(CoreSpecs, HybridGroupsAgreeOnOneHitLength) {
  CheckedManager m(config(64, {group(AttentionKind::kFull, 4), group(AttentionKind::kSlidingWindow, 4, 8)}));
  Request a(RequestId{1}, iota_tokens(21, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  EXPECT_EQ(m.table(a, 0).size(), 6u);
  EXPECT_EQ(m.table(a, 1).size(), 6u);
  Request b(RequestId{2}, concat(iota_tokens(20, 0), {5, 5}));
  auto hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.num_computed_tokens, 20);
  EXPECT_EQ(hit.blocks[0].size(), 5u);
  EXPECT_EQ(hit.blocks[1].size(), 5u);
  ASSERT_TRUE(m.allocate_slots(b, 2, hit.num_computed_tokens, &hit).has_value());
  // Only the full group keeps the whole prefix shared; the sliding group shares just its window.
  EXPECT_EQ(m.table(b, 0)[0], m.table(a, 0)[0]);
  EXPECT_EQ(m.table(b, 1)[0], 0);
  // After both finish their cached content serves a third request in both groups.
  m.free(a);
  m.free(b);
  Request c(RequestId{3}, concat(iota_tokens(20, 0), {9}));
  EXPECT_EQ(m.get_computed_blocks(c).num_computed_tokens, 20);
}

TEST(CoreSpecs, SpecValidationNamesTheProblem) {
  EXPECT_THROW(KVCacheManager{config(16, {group(AttentionKind::kSlidingWindow, 4, 0)})}, ConfigError);
  EXPECT_THROW(KVCacheManager{config(16, {group(AttentionKind::kFull, 0)})}, ConfigError);
  EXPECT_EQ(attention_kind_name(AttentionKind::kSlidingWindow), "sliding_window");
  EXPECT_EQ(attention_kind_name(AttentionKind::kCrossAttention), "cross_attention");
  EXPECT_EQ(attention_kind_name(AttentionKind::kFull), "full");
}

}  // namespace
}  // namespace pagedkv
