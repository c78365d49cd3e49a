// KVCacheManager, full attention: prefix lookup, allocate_slots (vLLM v1 semantics), free,
// can_allocate with the watermark (vLLM v0's AllocStatus), reset, and the worked examples of the
// reference texts. Every operation runs the checker (CheckedManager).
#include <gtest/gtest.h>

#include "core_test_support.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

using testing::CheckedManager;
using testing::concat;
using testing::free_order;
using testing::full_attention_config;
using testing::iota_tokens;

using Ids = std::vector<int32_t>;

Ids ids(std::span<const BlockId> s) { return testing::ids_of(s); }

// ---- the worked examples ---------------------------------------------------------------------

// Reference 001's worked example: A = system prompt + "What is Python?", B = the same system
// prompt + "What is Rust?". With blocks of 16 tokens, the first three blocks are identical; B
// reuses them (no new memory, no prefill for them) and only computes its own last block.
TEST(CoreManager, WorkedExampleTwoRequestsShareThreeBlocksOfASystemPrompt) {
  CheckedManager m(full_attention_config(32, 16));
  const auto shared = iota_tokens(48, 1000);  // "You are a helpful assistant.\n\nUser: What is"
  Request a(RequestId{1}, concat(shared, iota_tokens(5, 5000)));  // " Python?"
  Request b(RequestId{2}, concat(shared, iota_tokens(4, 6000)));  // " Rust?"
  ASSERT_EQ(m.admit(a), 0) << "the first request finds nothing cached";
  const Ids a_table = m.table(a);
  ASSERT_EQ(a_table.size(), 4u);
  ASSERT_EQ(m.admit(b), 48) << "B reuses the three full blocks of the shared prefix";
  const Ids b_table = m.table(b);
  ASSERT_EQ(b_table.size(), 4u);
  EXPECT_EQ(Ids(b_table.begin(), b_table.begin() + 3), Ids(a_table.begin(), a_table.begin() + 3));
  EXPECT_NE(b_table[3], a_table[3]) << "the differing last block is B's own";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m->pool().block(BlockId{a_table[static_cast<size_t>(i)]}).ref_cnt, 2);
  EXPECT_EQ(m->pool().block(BlockId{a_table[3]}).ref_cnt, 1);
  EXPECT_EQ(m->pool().block(BlockId{b_table[3]}).ref_cnt, 1);
  EXPECT_EQ(m->num_free_blocks(), 31 - 5) << "five distinct blocks for two four-block requests";
  const auto& stats = m->prefix_cache_stats();
  EXPECT_EQ(stats.requests, 2u);
  EXPECT_EQ(stats.queries, 53u + 52u);
  EXPECT_EQ(stats.hits, 48u);
}

// A block shared by two requests survives the first owner's free; the second free returns it.
TEST(CoreManager, WorkedExampleASharedBlockSurvivesOneOwnersFree) {
  CheckedManager m(full_attention_config(16, 4));
  Request a(RequestId{1}, iota_tokens(10, 0));  // blocks: [0-3] [4-7] [8-9]
  Request b(RequestId{2}, concat(iota_tokens(8, 0), {77, 78}));  // shares [0-3] [4-7]
  ASSERT_TRUE(m.admit(a).has_value());
  ASSERT_EQ(m.admit(b), 8);
  const Ids at = m.table(a), bt = m.table(b);
  ASSERT_TRUE(m.free(a));
  EXPECT_FALSE(m->has_request(a.id));
  EXPECT_TRUE(m->get_block_ids(a).empty());
  for (int i = 0; i < 2; ++i) {
    const KVCacheBlock& blk = m->pool().block(BlockId{at[static_cast<size_t>(i)]});
    EXPECT_EQ(blk.ref_cnt, 1) << "still B's";
    EXPECT_FALSE(blk.in_free_queue);
    EXPECT_TRUE(blk.has_hash);
  }
  EXPECT_TRUE(m->pool().block(BlockId{at[2]}).in_free_queue) << "A's private partial block is free";
  EXPECT_EQ(m.table(b), bt) << "B's table is untouched";
  ASSERT_TRUE(m.free(b));
  EXPECT_EQ(m->num_free_blocks(), 15);
  EXPECT_FALSE(m.free(b)) << "freeing an unknown request reports it";
}

// vLLM v0's AllocStatus with the default 1 % watermark: NEVER when the request cannot fit even
// in an empty cache (keeping the watermark free), LATER when it fits once others finish.
TEST(CoreManager, WorkedExampleWatermarkAndNever) {
  // 101 blocks: 100 usable, watermark int(0.01 * 101) = 1 block.
  CheckedManager m(full_attention_config(101, 4, 0.01));
  EXPECT_EQ(m->watermark_blocks(), 1);
  Request fits(RequestId{1}, iota_tokens(99 * 4, 0));  // 99 blocks: leaves exactly 1
  Request too_big(RequestId{2}, iota_tokens(100 * 4, 10000));  // 100 blocks: would leave 0 < 1
  Request small(RequestId{3}, iota_tokens(2 * 4, 20000));
  EXPECT_EQ(m.can_allocate(fits), AllocStatus::kOk);
  EXPECT_EQ(m.can_allocate(too_big), AllocStatus::kNever);
  EXPECT_EQ(m.can_allocate(small), AllocStatus::kOk);
  ASSERT_TRUE(m.admit(small).has_value());  // 98 free now
  EXPECT_EQ(m.can_allocate(fits), AllocStatus::kLater) << "98 free - 99 needed < watermark";
  EXPECT_EQ(m.can_allocate(too_big), AllocStatus::kNever);
  m.free(small);
  EXPECT_EQ(m.can_allocate(fits), AllocStatus::kOk);
  // Longer than the model allows: never.
  Request beyond(RequestId{4}, iota_tokens(m->max_model_len() + 1, 0));
  EXPECT_EQ(m.can_allocate(beyond), AllocStatus::kNever);
  EXPECT_EQ(alloc_status_name(AllocStatus::kOk), "OK");
  EXPECT_EQ(alloc_status_name(AllocStatus::kLater), "LATER");
  EXPECT_EQ(alloc_status_name(AllocStatus::kNever), "NEVER");
}

TEST(CoreManager, CanAllocateCountsPrefixHitsInUseAsFree) {
  CheckedManager m(full_attention_config(11, 4, 0.0));  // 10 usable, no watermark
  Request a(RequestId{1}, iota_tokens(25, 0));  // 7 blocks
  ASSERT_TRUE(m.admit(a).has_value());  // 3 free
  Request b(RequestId{2}, concat(iota_tokens(24, 0), {999, 998, 997}));  // 7 blocks, 6 shared
  EXPECT_EQ(m.can_allocate(b), AllocStatus::kOk) << "6 of B's 7 blocks are held by A already";
  Request c(RequestId{3}, iota_tokens(25, 500));  // 7 blocks, nothing shared
  EXPECT_EQ(m.can_allocate(c), AllocStatus::kLater);
  // Cached but free hit blocks do cost free blocks: touching takes them out of the free set.
  m.free(a);  // 10 free, 6 of them cached
  Request d(RequestId{4}, iota_tokens(3 * 4, 700));  // 3 unrelated blocks
  ASSERT_TRUE(m.admit(d).has_value());  // 7 free, A's content still cached
  EXPECT_EQ(m.can_allocate(b), AllocStatus::kOk) << "7 free >= 6 touched + 1 new";
  Request e(RequestId{5}, iota_tokens(4, 900));
  ASSERT_TRUE(m.admit(e).has_value());  // takes A's uncached partial block: 6 free, all cached
  EXPECT_EQ(m.can_allocate(b), AllocStatus::kLater);
}

TEST(CoreManager, DoubleFreeAtTheAllocatorIsAUsageError) {
  // The manager owns its requests' references; a caller releasing a block behind its back and
  // then freeing the request is a double free the pool refuses, leaving everything unchanged.
  CheckedManager m(full_attention_config(8, 4));
  Request a(RequestId{1}, iota_tokens(6, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  const Ids t = m.table(a);
  m->pool().free_blocks(std::vector<BlockId>{BlockId{t[1]}});  // the caller's mistake
  EXPECT_THROW(m->free(a), UsageError);
  EXPECT_TRUE(m->has_request(a.id)) << "the refused free left the request in place";
  EXPECT_EQ(m->pool().block(BlockId{t[0]}).ref_cnt, 1);
  EXPECT_THROW(m->check_invariants(), InvariantError) << "the checker sees the stray release";
}

// ---- prefix lookup ---------------------------------------------------------------------------

TEST(CoreManager, LookupStopsAtTheFirstMiss) {
  CheckedManager m(full_attention_config(32, 4));
  Request a(RequestId{1}, iota_tokens(16, 0));  // 4 full blocks
  ASSERT_TRUE(m.admit(a).has_value());
  // Same block 0, different block 1, same blocks 2 and 3: only block 0 can be used.
  auto tokens = iota_tokens(16, 0);
  tokens[5] = 999;
  Request b(RequestId{2}, concat(tokens, {1}));
  ComputedBlocks hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.num_computed_tokens, 4);
  EXPECT_EQ(ids(hit.blocks[0]), Ids{m.table(a)[0]});
  EXPECT_EQ(hit.num_groups, 1);
}

TEST(CoreManager, APartialBlockIsNeverCachedAndOneTokenIsAlwaysLeftToCompute) {
  CheckedManager m(full_attention_config(32, 4));
  Request a(RequestId{1}, iota_tokens(10, 0));  // 2 full blocks + 2 tokens
  ASSERT_TRUE(m.admit(a).has_value());
  EXPECT_EQ(m->pool().num_cached_blocks(), 2) << "the partial third block is not cached";
  EXPECT_FALSE(m->pool().block(BlockId{m.table(a)[2]}).has_hash);
  // The same 10 tokens: the partial block cannot hit, so 8 tokens.
  Request same(RequestId{2}, iota_tokens(10, 0));
  EXPECT_EQ(m.get_computed_blocks(same).num_computed_tokens, 8);
  // Exactly the 8 cached tokens: the last block is withheld so the model computes a token.
  Request exact(RequestId{3}, iota_tokens(8, 0));
  EXPECT_EQ(m.get_computed_blocks(exact).num_computed_tokens, 4);
  Request one_block(RequestId{4}, iota_tokens(4, 0));
  EXPECT_EQ(m.get_computed_blocks(one_block).num_computed_tokens, 0);
  Request nine(RequestId{5}, iota_tokens(9, 0));
  EXPECT_EQ(m.get_computed_blocks(nine).num_computed_tokens, 8);
  Request empty(RequestId{6}, {});
  EXPECT_EQ(m.get_computed_blocks(empty).num_computed_tokens, 0);
}

TEST(CoreManager, LookupTouchesNothingUntilAllocation) {
  CheckedManager m(full_attention_config(16, 4));
  Request a(RequestId{1}, iota_tokens(12, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  m.free(a);
  const auto order = free_order(m->pool());
  Request b(RequestId{2}, iota_tokens(13, 0));
  ComputedBlocks hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.num_computed_tokens, 12);
  EXPECT_EQ(free_order(m->pool()), order) << "a lookup alone must not take blocks out of the queue";
  for (BlockId blk : hit.blocks[0]) EXPECT_EQ(m->pool().block(blk).ref_cnt, 0);
  // Allocation touches the hits: they leave the free queue, their refs go to 1.
  auto got = m.allocate_slots(b, 1, hit.num_computed_tokens, &hit);
  ASSERT_TRUE(got.has_value());
  for (BlockId blk : hit.blocks[0]) {
    EXPECT_EQ(m->pool().block(blk).ref_cnt, 1);
    EXPECT_FALSE(m->pool().block(blk).in_free_queue);
  }
  EXPECT_EQ(got->blocks[0].size(), 1u) << "only the block for the 13th token is new";
  EXPECT_EQ(m->num_free_blocks(), 15 - 4);
  EXPECT_EQ(m->pool().stats().evictions, 0u);
  EXPECT_EQ(m->pool().block(hit.blocks[0][0]).hit_count, 1u);
}

// ---- allocate_slots --------------------------------------------------------------------------

TEST(CoreManager, AllocateSlotsReturnsOnlyTheNewBlocks) {
  CheckedManager m(full_attention_config(16, 4));
  Request r(RequestId{1}, iota_tokens(6, 0));
  auto first = m.allocate_slots(r, 6);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(ids(first->blocks[0]), (Ids{1, 2}));
  EXPECT_FALSE(first->table_rewritten);
  r.num_computed_tokens = 6;
  r.append_token(100);
  auto second = m.allocate_slots(r, 1);  // slot 7 fits in block 2
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(second->blocks[0].empty());
  r.num_computed_tokens = 7;
  r.append_token(101);
  second = m.allocate_slots(r, 1);  // slot 8 fills block 2
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(second->blocks[0].empty());
  r.num_computed_tokens = 8;
  r.append_token(102);
  auto third = m.allocate_slots(r, 1);  // slot 9 opens block 3
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(ids(third->blocks[0]), (Ids{3}));
  EXPECT_EQ(m.table(r), (Ids{1, 2, 3}));
}

// vLLM v1: admission fails, changing nothing, when the new blocks plus the cached free blocks
// the request would touch exceed the free blocks; otherwise touching could take the very blocks
// the allocation then needs and over-commit the pool.
TEST(CoreManager, CachedFreeBlocksCountAsUnavailableAtAdmission) {
  CheckedManager m(full_attention_config(9, 4));  // 8 usable
  Request a(RequestId{1}, iota_tokens(12, 0));  // 3 blocks, all full and cached
  ASSERT_TRUE(m.admit(a).has_value());
  m.free(a);  // 8 free, 3 of them A's cached blocks
  // The free queue is 4 5 6 7 8 3 2 1; a 4-block filler takes 4 5 6 7 and leaves 8 3 2 1.
  Request filler(RequestId{2}, iota_tokens(16, 5000));
  ASSERT_TRUE(m.admit(filler).has_value());
  EXPECT_EQ(m->num_free_blocks(), 4);
  EXPECT_EQ(m->pool().num_cached_blocks(), 3 + 4);
  Request b(RequestId{3}, concat(iota_tokens(12, 0), iota_tokens(5, 900)));  // 3 hits + 2 new blocks
  ComputedBlocks hit = m.get_computed_blocks(b);
  ASSERT_EQ(hit.num_computed_tokens, 12);
  EXPECT_EQ(m->get_num_blocks_to_allocate(b, b.num_tokens(), &hit), 2 + 3);
  const auto order = free_order(m->pool());
  auto got = m.allocate_slots(b, 5, 12, &hit);
  EXPECT_FALSE(got.has_value()) << "5 blocks needed (2 new + 3 touched), 4 free";
  EXPECT_FALSE(m->has_request(b.id));
  EXPECT_EQ(free_order(m->pool()), order);
  for (BlockId blk : hit.blocks[0]) EXPECT_EQ(m->pool().block(blk).ref_cnt, 0);
  EXPECT_EQ(m->pool().stats().evictions, 0u);
  // One block fewer needed: it fits exactly.
  Request c(RequestId{4}, concat(iota_tokens(12, 0), iota_tokens(4, 900)));  // 3 hits + 1 new
  hit = m.get_computed_blocks(c);
  got = m.allocate_slots(c, 4, 12, &hit);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(m->num_free_blocks(), 0);
  EXPECT_EQ(got->blocks[0].size(), 1u);
}

TEST(CoreManager, AFailedAllocationChangesNothing) {
  CheckedManager m(full_attention_config(6, 4));  // 5 usable
  Request a(RequestId{1}, iota_tokens(12, 0));
  ASSERT_TRUE(m.admit(a).has_value());  // 3 blocks
  Request b(RequestId{2}, iota_tokens(12, 100));
  const auto order = free_order(m->pool());
  const auto cached = m->pool().num_cached_blocks();
  EXPECT_FALSE(m.admit(b).has_value());
  EXPECT_FALSE(m->has_request(b.id));
  EXPECT_EQ(free_order(m->pool()), order);
  EXPECT_EQ(m->pool().num_cached_blocks(), cached);
  // A running request that cannot grow keeps what it has.
  a.append_token(1);
  const Ids before = m.table(a);
  Request c(RequestId{3}, iota_tokens(8, 200));
  ASSERT_TRUE(m.admit(c).has_value());  // 0 free
  EXPECT_FALSE(m.allocate_slots(a, 1).has_value());
  EXPECT_EQ(m.table(a), before);
}

TEST(CoreManager, LookaheadSlotsAreAllocatedButNotCached) {
  CheckedManager m(full_attention_config(16, 4));
  Request r(RequestId{1}, iota_tokens(4, 0));
  auto got = m.allocate_slots(r, 4, 0, nullptr, /*num_lookahead_tokens=*/5);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->blocks[0].size(), 3u) << "4 + 5 slots need 3 blocks";
  EXPECT_EQ(m->pool().num_cached_blocks(), 1) << "only the scheduled full block is cached";
}

TEST(CoreManager, ChunkedPrefillCachesBlocksAsTheyAreScheduled) {
  CheckedManager m(full_attention_config(16, 4));
  Request r(RequestId{1}, iota_tokens(14, 0));
  ASSERT_TRUE(m.allocate_slots(r, 6).has_value());  // tokens 0..5: block 0 full
  EXPECT_EQ(m->pool().num_cached_blocks(), 1);
  r.num_computed_tokens = 6;
  ASSERT_TRUE(m.allocate_slots(r, 6).has_value());  // 6..11: blocks 1 and 2 full
  EXPECT_EQ(m->pool().num_cached_blocks(), 3);
  r.num_computed_tokens = 12;
  ASSERT_TRUE(m.allocate_slots(r, 2).has_value());  // 12..13: partial block 3
  EXPECT_EQ(m->pool().num_cached_blocks(), 3);
  EXPECT_EQ(m.table(r).size(), 4u);
  // A second request can already reuse the prefix of the first.
  Request twin(RequestId{2}, iota_tokens(14, 0));
  EXPECT_EQ(m.get_computed_blocks(twin).num_computed_tokens, 12);
}

TEST(CoreManager, DelayedCachingCachesNothingUntilAskedAgain) {
  CheckedManager m(full_attention_config(16, 4));
  Request r(RequestId{1}, iota_tokens(8, 0));
  ASSERT_TRUE(m.allocate_slots(r, 8, 0, nullptr, 0, /*delay_cache_blocks=*/true).has_value());
  EXPECT_EQ(m->pool().num_cached_blocks(), 0);
  r.num_computed_tokens = 8;
  r.append_token(50);
  ASSERT_TRUE(m.allocate_slots(r, 1).has_value());
  EXPECT_EQ(m->pool().num_cached_blocks(), 2) << "the next normal call caches what is full";
}

// nano-vllm's may_append: a block joins the cache as soon as decoding fills it.
TEST(CoreManager, BlocksAreCachedAsDecodeFillsThem) {
  CheckedManager m(full_attention_config(16, 4));
  Request r(RequestId{1}, iota_tokens(6, 0));
  ASSERT_TRUE(m.admit(r).has_value());
  EXPECT_EQ(m->pool().num_cached_blocks(), 1);
  ASSERT_TRUE(m.decode(r, 100).has_value());  // 7 tokens
  EXPECT_EQ(m->pool().num_cached_blocks(), 1);
  ASSERT_TRUE(m.decode(r, 101).has_value());  // 8 tokens: block 1 is full
  EXPECT_EQ(m->pool().num_cached_blocks(), 2);
  EXPECT_TRUE(m->pool().block(BlockId{m.table(r)[1]}).has_hash);
  // Another request with the prompt plus those outputs hits both blocks.
  Request follow(RequestId{2}, concat(iota_tokens(6, 0), {100, 101, 7}));
  EXPECT_EQ(m.get_computed_blocks(follow).num_computed_tokens, 8);
}

TEST(CoreManager, PreemptedRequestReadmitsWithItsOwnCachedBlocks) {
  CheckedManager m(full_attention_config(16, 4));
  Request r(RequestId{1}, iota_tokens(10, 0));
  ASSERT_TRUE(m.admit(r).has_value());
  for (TokenId t = 0; t < 5; ++t) ASSERT_TRUE(m.decode(r, 500 + t).has_value());  // 15 tokens
  const Ids before = m.table(r);
  // Preempt (recompute): free everything, keep the outputs.
  m.free(r);
  r.num_computed_tokens = 0;
  auto hit = m.admit(r);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, 12) << "prompt + outputs: three full blocks are still cached";
  const Ids after = m.table(r);
  EXPECT_EQ(Ids(after.begin(), after.begin() + 3), Ids(before.begin(), before.begin() + 3));
}

TEST(CoreManager, MisuseIsAUsageError) {
  CheckedManager m(full_attention_config(16, 4));
  Request r(RequestId{1}, iota_tokens(8, 0));
  EXPECT_THROW(m->allocate_slots(r, 0), UsageError);
  EXPECT_THROW(m->allocate_slots(r, -3), UsageError);
  EXPECT_THROW(m->allocate_slots(r, 1, -1), UsageError);
  EXPECT_THROW(m->allocate_slots(r, 1, 0, nullptr, -1), UsageError);
  ASSERT_TRUE(m.admit(r).has_value());
  // Prefix hits apply only at admission.
  Request twin(RequestId{2}, iota_tokens(9, 0));
  ComputedBlocks hit = m.get_computed_blocks(twin);
  ASSERT_GT(hit.num_computed_tokens, 0);
  EXPECT_THROW(m->allocate_slots(r, 1, hit.num_computed_tokens, &hit), UsageError);
  m.check();
  EXPECT_TRUE(m->get_block_ids(RequestId{99}).empty());
  EXPECT_TRUE(m->get_block_ids(r, 5).empty()) << "unknown group";
}

TEST(CoreManager, ConfigurationErrorsNameTheBadValue) {
  auto bad_watermark = full_attention_config(16, 4);
  bad_watermark.watermark = 1.5;
  EXPECT_THROW(KVCacheManager{std::move(bad_watermark)}, ConfigError);
  auto negative_len = full_attention_config(16, 4);
  negative_len.max_model_len = -1;
  EXPECT_THROW(KVCacheManager{std::move(negative_len)}, ConfigError);
  auto no_groups = full_attention_config(16, 4);
  no_groups.cache.groups.clear();
  EXPECT_THROW(KVCacheManager{std::move(no_groups)}, ConfigError);
  auto too_few = full_attention_config(1, 4);
  EXPECT_THROW(KVCacheManager{std::move(too_few)}, ConfigError);
  auto too_many = full_attention_config(16, 4);
  for (int i = 0; i < kMaxKVCacheGroups; ++i) too_many.cache.groups.push_back(too_many.cache.groups[0]);
  EXPECT_THROW(KVCacheManager{std::move(too_many)}, ConfigError);
  // Groups may differ in block size (pages matched), each a multiple of the smallest (the hash
  // granularity): 4 and 8 run, 4 and 6 cannot share hashes.
  auto mixed = full_attention_config(16, 4);
  mixed.cache.groups.push_back(mixed.cache.groups[0]);
  mixed.cache.groups[1].spec.block_size = 8;
  EXPECT_NO_THROW(KVCacheManager{std::move(mixed)});
  auto unaligned = full_attention_config(16, 4);
  unaligned.cache.groups.push_back(unaligned.cache.groups[0]);
  unaligned.cache.groups[1].spec.block_size = 6;
  EXPECT_THROW(KVCacheManager{std::move(unaligned)}, ConfigError);
  auto interval = full_attention_config(16, 4);
  interval.cache.groups.push_back(interval.cache.groups[0]);
  interval.cache.groups[1].spec.block_size = 8;
  interval.sliding_window_checkpoint_interval = 4;  // a multiple of 4, not of the hits' 8
  EXPECT_THROW(KVCacheManager{std::move(interval)}, ConfigError);
}

TEST(CoreManager, MaxModelLenCapsTheSlots) {
  auto c = full_attention_config(64, 4);
  c.max_model_len = 10;
  CheckedManager m(std::move(c));
  EXPECT_EQ(m->max_model_len(), 10);
  Request r(RequestId{1}, iota_tokens(8, 0));
  auto got = m.allocate_slots(r, 8, 0, nullptr, /*num_lookahead_tokens=*/8);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(m.table(r).size(), 3u) << "16 slots asked, capped at 10 tokens = 3 blocks";
  CheckedManager whole(full_attention_config(9, 4));
  EXPECT_EQ(whole->max_model_len(), 32) << "default: what the usable blocks hold";
}

// Scheduling tokens past max_model_len is the caller's error: the manager refuses it before
// changing anything (lookahead slots are capped instead: speculative tokens near the end).
TEST(CoreManager, SchedulingPastMaxModelLenIsAUsageError) {
  auto c = full_attention_config(64, 4);
  c.max_model_len = 12;
  CheckedManager m(std::move(c));
  Request r(RequestId{1}, iota_tokens(10, 0));
  ASSERT_TRUE(m.admit(r).has_value());
  for (TokenId t = 0; t < 2; ++t) ASSERT_TRUE(m.decode(r, t).has_value());  // 12 tokens: the limit
  const Ids before = m.table(r);
  r.append_token(99);
  EXPECT_THROW(m->allocate_slots(r, 1), UsageError);
  m.check();
  EXPECT_EQ(m.table(r), before);
  EXPECT_EQ(m->pool().num_cached_blocks(), 3);
  Request too_long(RequestId{2}, iota_tokens(13, 100));
  EXPECT_THROW(m->allocate_slots(too_long, 13), UsageError);
  EXPECT_FALSE(m->has_request(too_long.id));
  m.check();
}

TEST(CoreManager, CachingDisabledOrSkippedNeverShares) {
  auto c = full_attention_config(16, 4);
  c.enable_caching = false;
  CheckedManager off(std::move(c));
  Request a(RequestId{1}, iota_tokens(9, 0));
  Request b(RequestId{2}, iota_tokens(9, 0));
  ASSERT_EQ(off.admit(a), 0);
  ASSERT_EQ(off.admit(b), 0);
  EXPECT_EQ(off->pool().num_cached_blocks(), 0);
  EXPECT_TRUE(a.block_hashes.empty()) << "no hashing work when caching is off";

  CheckedManager on(full_attention_config(16, 4));
  Request x(RequestId{1}, iota_tokens(9, 0));
  Request y(RequestId{2}, iota_tokens(9, 0));
  y.skip_prefix_cache = true;  // e.g. prompt logprobs requested
  ASSERT_EQ(on.admit(x), 0);
  ASSERT_EQ(on.admit(y), 0) << "a request that skips the cache gets no hits";
  EXPECT_EQ(on->prefix_cache_stats().requests, 1u) << "skipped lookups are not counted";
}

TEST(CoreManager, ResetPrefixCacheFullAndPartial) {
  CheckedManager m(full_attention_config(16, 4));
  Request a(RequestId{1}, iota_tokens(9, 0));
  Request b(RequestId{2}, iota_tokens(9, 100));
  ASSERT_TRUE(m.admit(a).has_value());
  ASSERT_TRUE(m.admit(b).has_value());
  m.free(a);
  ResetResult partial = m.reset_prefix_cache();
  EXPECT_EQ(partial.removed, 2);
  EXPECT_EQ(partial.kept_in_use, 2) << "B's cached blocks are in use";
  EXPECT_FALSE(partial.complete());
  Request again(RequestId{3}, iota_tokens(9, 0));
  EXPECT_EQ(m.get_computed_blocks(again).num_computed_tokens, 0) << "A's content is forgotten";
  Request b_twin(RequestId{4}, iota_tokens(9, 100));
  EXPECT_EQ(m.get_computed_blocks(b_twin).num_computed_tokens, 8) << "B's survives";
  m.free(b);
  ResetResult full = m.reset_prefix_cache();
  EXPECT_TRUE(full.complete());
  EXPECT_EQ(full.removed, 2);
  EXPECT_EQ(m->pool().num_cached_blocks(), 0);
  EXPECT_EQ(m.get_computed_blocks(b_twin).num_computed_tokens, 0);
  EXPECT_EQ(m->num_free_blocks(), 15);
}

TEST(CoreManager, FreeReleasesTailFirstSoTheSharedHeadIsEvictedLast) {
  CheckedManager m(full_attention_config(8, 4));  // 7 usable
  Request a(RequestId{1}, iota_tokens(13, 0));  // 4 blocks: 1 2 3 4
  ASSERT_TRUE(m.admit(a).has_value());
  m.free(a);
  EXPECT_EQ(free_order(m->pool()), (Ids{5, 6, 7, 4, 3, 2, 1}));
  // Pressure: 5 fresh blocks evict the tail (block 4 holds no hash, then 3) before the head.
  Request b(RequestId{2}, iota_tokens(20, 1000));
  ASSERT_TRUE(m.admit(b).has_value());
  EXPECT_EQ(m.table(b), (Ids{5, 6, 7, 4, 3}));
  EXPECT_EQ(m->pool().stats().evictions, 1u) << "only block 3 held cached content";
  Request a_again(RequestId{3}, iota_tokens(13, 0));
  EXPECT_EQ(m.get_computed_blocks(a_again).num_computed_tokens, 8) << "the head survived";
}

TEST(CoreManager, UsageAndFreeBlocks) {
  CheckedManager m(full_attention_config(11, 4));  // 10 usable
  EXPECT_DOUBLE_EQ(m->usage(), 0.0);
  Request a(RequestId{1}, iota_tokens(12, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  EXPECT_DOUBLE_EQ(m->usage(), 0.3);
  EXPECT_EQ(m->num_free_blocks(), 7);
  EXPECT_EQ(m->num_requests(), 1);
  m.free(a);
  EXPECT_DOUBLE_EQ(m->usage(), 0.0) << "cached free blocks count as free";
}

// A freed request's entry is kept for reuse (no allocation at the next admission); the next
// request that gets it must start from an empty table with nothing cached and no fork state.
TEST(CoreManager, AReusedRequestEntryStartsEmpty) {
  CheckedManager m(full_attention_config(32, 4));
  Request a(RequestId{1}, iota_tokens(14, 0));  // 3 full blocks cached, 1 partial
  ASSERT_EQ(m.admit(a), 0);
  Request a_child(RequestId{2}, a.tokens);
  a_child.num_computed_tokens = a.num_computed_tokens;
  m.fork(a, a_child);  // both entries now carry fork state
  ASSERT_TRUE(m.free(a));
  ASSERT_TRUE(m.free(a_child));
  EXPECT_EQ(m->num_requests(), 0);
  Request b(RequestId{3}, iota_tokens(3, 500));  // one partial block: takes a released entry
  ASSERT_EQ(m.admit(b), 0);
  ASSERT_EQ(m.table(b).size(), 1u) << "the entry kept no blocks of its previous owner";
  // Filling b's block caches it and shares nothing: a stale fork flag or cached count would
  // show as a copy or as a broken invariant (checked after every call).
  ASSERT_TRUE(m.decode(b, 7).has_value());
  ASSERT_TRUE(m.decode(b, 8).has_value());
  EXPECT_FALSE(m->has_pending_copies());
  EXPECT_EQ(m.table(b).size(), 2u);
  Request c(RequestId{1}, iota_tokens(14, 0));  // a's id again, a's content: hits a's blocks
  EXPECT_EQ(m.admit(c), 12);
  EXPECT_EQ(m->num_requests(), 2);
}

}  // namespace
}  // namespace pagedkv
