// BlockPool: allocation (all or nothing, front of the LRU queue), release (given order, double
// free refused with nothing changed), touch, the prefix-cache map with content confirmation,
// eviction on reuse, reset, and the checker. Every operation runs the checker (CheckedPool).
#include <gtest/gtest.h>

#include <string>

#include "core_test_support.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

using testing::CheckedPool;
using testing::free_order;
using testing::ids_of;
using testing::pool_options;

std::vector<BlockId> bids(std::initializer_list<int32_t> ids) {
  std::vector<BlockId> out;
  for (int32_t i : ids) out.push_back(BlockId{i});
  return out;
}

std::vector<int32_t> range(int32_t first, int32_t last) {  // [first, last]
  std::vector<int32_t> out;
  for (int32_t i = first; i <= last; ++i) out.push_back(i);
  return out;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A content key whose hash is (lo, 0); the tokens live in the caller's vector.
BlockContentKey key_for(uint64_t lo, const std::vector<TokenId>& tokens, uint64_t extra_digest = 0,
                        uint16_t group = 0) {
  BlockContentKey k;
  k.hash = BlockHash{lo, 0};
  k.parent = BlockHash{lo + 1000, 0};
  k.tokens = tokens;
  k.extra_digest = extra_digest;
  k.group = group;
  return k;
}

TEST(CoreBlockPool, RejectsBadConfiguration) {
  EXPECT_THROW(BlockPool(pool_options(1, 16)), ConfigError);
  EXPECT_THROW(BlockPool(pool_options(0, 16)), ConfigError);
  EXPECT_THROW(BlockPool(pool_options(8, 0)), ConfigError);
  EXPECT_THROW(BlockPool(pool_options(8, -4)), ConfigError);
}

TEST(CoreBlockPool, StartsWithEveryBlockButTheNullBlockFreeInIdOrder) {
  CheckedPool pool(pool_options(8, 4));
  EXPECT_EQ(pool->num_blocks(), 8);
  EXPECT_EQ(pool->num_usable_blocks(), 7);
  EXPECT_EQ(pool->num_free_blocks(), 7);
  EXPECT_DOUBLE_EQ(pool->usage(), 0.0);
  EXPECT_EQ(free_order(pool.raw()), range(1, 7));
  const KVCacheBlock& null_block = pool->block(pool->null_block());
  EXPECT_TRUE(null_block.is_null);
  EXPECT_FALSE(null_block.in_free_queue);
  EXPECT_EQ(pool->null_block(), BlockId{0});
}

TEST(CoreBlockPool, AllocatePopsTheFrontWithOneReferenceEach) {
  CheckedPool pool(pool_options(8, 4));
  auto got = pool.allocate(3);
  EXPECT_EQ(ids_of(got), (std::vector<int32_t>{1, 2, 3}));
  for (BlockId b : got) {
    EXPECT_EQ(pool->block(b).ref_cnt, 1);
    EXPECT_FALSE(pool->block(b).in_free_queue);
  }
  EXPECT_EQ(pool->num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(pool->usage(), 3.0 / 7.0);
  EXPECT_EQ(free_order(pool.raw()), range(4, 7));
  EXPECT_EQ(pool->stats().allocated_blocks, 3u);
  // allocate appends to what the caller already has.
  std::vector<BlockId> table = got;
  ASSERT_TRUE(pool.try_allocate(2, table));
  EXPECT_EQ(ids_of(table), (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(pool.try_allocate(0, table));  // nothing asked, nothing changed
  EXPECT_EQ(table.size(), 5u);
}

TEST(CoreBlockPool, AllocationIsAllOrNothing) {
  CheckedPool pool(pool_options(8, 4));
  pool.allocate(5);  // 2 left
  const auto order_before = free_order(pool.raw());
  std::vector<BlockId> out = bids({42});
  EXPECT_FALSE(pool.try_allocate(3, out));
  EXPECT_EQ(ids_of(out), (std::vector<int32_t>{42})) << "a refused allocation must not touch the output";
  EXPECT_EQ(pool->num_free_blocks(), 2);
  EXPECT_EQ(free_order(pool.raw()), order_before);
  EXPECT_EQ(pool->stats().allocated_blocks, 5u);
  EXPECT_TRUE(pool.try_allocate(2, out));
  EXPECT_EQ(pool->num_free_blocks(), 0);
  EXPECT_DOUBLE_EQ(pool->usage(), 1.0);
  EXPECT_FALSE(pool.try_allocate(1, out));
  EXPECT_THROW(pool->allocate(-1, out), UsageError);
  pool.check();
}

TEST(CoreBlockPool, FreeJoinsTheBackInTheGivenOrder) {
  CheckedPool pool(pool_options(8, 4));
  auto a = pool.allocate(3);  // 1 2 3
  pool.free_blocks(bids({3, 1, 2}));
  EXPECT_EQ(free_order(pool.raw()), cat(range(4, 7), {3, 1, 2}));
  // The next allocations take the never-used blocks first, then 3, 1, 2 in that order.
  auto b = pool.allocate(5);
  EXPECT_EQ(ids_of(b), (std::vector<int32_t>{4, 5, 6, 7, 3}));
}

TEST(CoreBlockPool, FreeWindowBlocksKeepsCheckpointsAtTheBackAndDropsTheRestToTheFront) {
  BlockPoolOptions o = pool_options(8, 4, /*events=*/true);
  o.group_specs = {KVCacheSpec{.block_size = 4},
                   KVCacheSpec{.kind = AttentionKind::kSlidingWindow, .block_size = 4, .sliding_window = 6}};
  CheckedPool pool(std::move(o));
  auto a = pool.allocate(4);  // 1 2 3 4
  const std::vector<TokenId> t1{1, 2, 3, 4}, t2{5, 6, 7, 8}, t3{9, 9, 9, 9};
  pool.cache_block(a[0], key_for(11, t1, 0, 1));
  pool.cache_block(a[1], key_for(12, t2, 0, 1));
  pool.cache_block(a[2], key_for(13, t3, 0, 1));
  pool->mark_window_checkpoint(a[1]);
  pool->mark_window_checkpoint(a[3]);  // not cached: no effect
  EXPECT_TRUE(pool->block(a[1]).window_checkpoint);
  EXPECT_FALSE(pool->block(a[3]).window_checkpoint);
  pool.touch({a[2]});  // a second owner: only a reference is dropped
  pool->take_events();
  pool->free_window_blocks(bids({1, 2, 3, 4}));
  pool.check();
  // 2 (a checkpoint) joined the back, cached; 1 lost its content and 4 had none: both went to
  // the front, the later one first; 3 is still held.
  EXPECT_EQ(free_order(pool.raw()), cat({4, 1}, cat(range(5, 7), {2})));
  EXPECT_TRUE(pool->block(a[1]).has_hash);
  EXPECT_FALSE(pool->block(a[0]).has_hash);
  EXPECT_TRUE(pool->block(a[2]).has_hash);
  EXPECT_EQ(pool->stats().window_checkpoints_retained, 1u);
  EXPECT_EQ(pool->stats().window_blocks_slid_out, 2u);
  const auto events = pool->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, RemovalReason::kSlidOut);
  EXPECT_EQ(events[0].attention_kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(events[0].sliding_window, 6);
  // A double free changes nothing.
  EXPECT_THROW(pool->free_window_blocks(bids({3, 3})), UsageError);
  EXPECT_EQ(pool->block(a[2]).ref_cnt, 1);
  pool.check();
  // Reusing the checkpoint (the last of the 6 free blocks) counts an evicted checkpoint.
  pool.allocate(5);
  EXPECT_EQ(pool->stats().window_checkpoints_evicted, 0u);
  pool.allocate(1);
  EXPECT_EQ(pool->stats().window_checkpoints_evicted, 1u);
}

TEST(CoreBlockPool, ReleaseWithReferencesLeftKeepsTheBlock) {
  CheckedPool pool(pool_options(8, 4));
  auto a = pool.allocate(1);
  pool.touch(a);  // a second owner
  EXPECT_EQ(pool->block(a[0]).ref_cnt, 2);
  pool.free_blocks(a);
  EXPECT_EQ(pool->block(a[0]).ref_cnt, 1);
  EXPECT_FALSE(pool->block(a[0]).in_free_queue);
  EXPECT_EQ(pool->num_free_blocks(), 6);
  pool.free_blocks(a);
  EXPECT_EQ(pool->block(a[0]).ref_cnt, 0);
  EXPECT_TRUE(pool->block(a[0]).in_free_queue);
  EXPECT_EQ(pool->num_free_blocks(), 7);
}

// vLLM v0's BlockAllocator raises "Double free!" when a block with ref_count 0 is freed again.
// Here the caller gets a UsageError and the pool is exactly as before the call.
TEST(CoreBlockPool, DoubleFreeIsAUsageErrorAndChangesNothing) {
  CheckedPool pool(pool_options(8, 4));
  auto a = pool.allocate(3);  // 1 2 3
  pool.free_blocks(bids({2}));
  const auto order = free_order(pool.raw());
  auto expect_unchanged = [&] {
    pool.check();
    EXPECT_EQ(free_order(pool.raw()), order);
    EXPECT_EQ(pool->block(BlockId{1}).ref_cnt, 1);
    EXPECT_EQ(pool->block(BlockId{3}).ref_cnt, 1);
    EXPECT_EQ(pool->num_free_blocks(), 5);
  };
  try {
    pool->free_blocks(bids({2}));
    ADD_FAILURE() << "double free not detected";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("double free"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find('2'), std::string::npos) << "the message names the block: " << e.what();
  }
  expect_unchanged();
  // A batch whose last entry is bad must not release the good ones before it.
  EXPECT_THROW(pool->free_blocks(bids({3, 1, 2})), UsageError);
  expect_unchanged();
  // The same block twice in one call with only one reference is a double free as well.
  EXPECT_THROW(pool->free_blocks(bids({1, 1})), UsageError);
  expect_unchanged();
  // Out of range ids are refused.
  EXPECT_THROW(pool->free_blocks(bids({8})), UsageError);
  EXPECT_THROW(pool->free_blocks(bids({-3})), UsageError);
  expect_unchanged();
}

TEST(CoreBlockPool, ABlockListedTwiceWithTwoReferencesIsFine) {
  CheckedPool pool(pool_options(8, 4));
  auto a = pool.allocate(1);
  pool.touch(a);
  pool.free_blocks({a[0], a[0]});
  EXPECT_EQ(pool->block(a[0]).ref_cnt, 0);
  EXPECT_EQ(pool->num_free_blocks(), 7);
}

TEST(CoreBlockPool, TheNullBlockIsNeverFreedNorCounted) {
  CheckedPool pool(pool_options(8, 4));
  auto a = pool.allocate(1);
  // Sliding-window tables hold the null block; releasing or touching it is a no-op.
  pool.free_blocks({pool->null_block(), a[0], pool->null_block()});
  pool.touch({pool->null_block()});
  EXPECT_EQ(pool->block(pool->null_block()).ref_cnt, 0);
  EXPECT_FALSE(pool->block(pool->null_block()).in_free_queue);
  EXPECT_EQ(pool->num_free_blocks(), 7);
  std::vector<BlockId> all;
  ASSERT_TRUE(pool.try_allocate(7, all));
  for (BlockId b : all) EXPECT_NE(b, pool->null_block());
}

TEST(CoreBlockPool, TouchingAFreeCachedBlockTakesItOutOfTheFreeQueue) {
  CheckedPool pool(pool_options(8, 4));
  const std::vector<TokenId> tokens{1, 2, 3, 4};
  auto a = pool.allocate(1);
  pool.cache_block(a[0], key_for(9, tokens));
  pool.free_blocks(a);  // cached and free: back of the queue
  EXPECT_EQ(free_order(pool.raw()).back(), a[0].value);
  auto hit = pool->find_cached(key_for(9, tokens));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, a[0]);
  pool.touch({*hit});
  EXPECT_EQ(pool->block(*hit).ref_cnt, 1);
  EXPECT_FALSE(pool->block(*hit).in_free_queue);
  EXPECT_EQ(pool->num_free_blocks(), 6);
  EXPECT_TRUE(pool->block(*hit).has_hash) << "touching keeps the cached content";
  EXPECT_EQ(pool->stats().evictions, 0u);
}

TEST(CoreBlockPool, CachedLookupConfirmsEveryPartOfTheContent) {
  CheckedPool pool(pool_options(8, 4));
  const std::vector<TokenId> tokens{1, 2, 3, 4};
  auto a = pool.allocate(1);
  pool.cache_block(a[0], key_for(9, tokens, /*extra_digest=*/77, /*group=*/0));
  EXPECT_EQ(pool->num_cached_blocks(), 1);
  EXPECT_TRUE(pool->find_cached(key_for(9, tokens, 77)).has_value());
  // Same hash, anything else different: a collision, never a hit.
  const std::vector<TokenId> other_tokens{1, 2, 3, 5};
  EXPECT_FALSE(pool->find_cached(key_for(9, other_tokens, 77)).has_value()) << "tokens differ";
  EXPECT_FALSE(pool->find_cached(key_for(9, tokens, 78)).has_value()) << "extra keys differ";
  EXPECT_FALSE(pool->find_cached(key_for(9, tokens, 77, 1)).has_value()) << "group differs";
  BlockContentKey other_parent = key_for(9, tokens, 77);
  other_parent.parent = BlockHash{1, 1};
  EXPECT_FALSE(pool->find_cached(other_parent).has_value()) << "parent differs";
  EXPECT_FALSE(pool->find_cached(key_for(10, tokens, 77)).has_value()) << "hash differs";
  const std::vector<TokenId> short_tokens{1, 2, 3};
  EXPECT_FALSE(pool->find_cached(key_for(9, short_tokens, 77)).has_value()) << "a partial block never hits";
  EXPECT_EQ(pool->cached_tokens(a[0]).size(), 4u);
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), pool->cached_tokens(a[0]).begin()));
  EXPECT_EQ(pool->cached_extra_digest(a[0]), 77u);
  EXPECT_EQ(pool->cached_parent(a[0]), (BlockHash{1009, 0}));
}

TEST(CoreBlockPool, ACachedBlocksKeyIsTheOneItWasCachedUnder) {
  BlockPoolOptions o = pool_options(8, 4);
  o.group_specs = {KVCacheSpec{.block_size = 4}, KVCacheSpec{.block_size = 4}};
  CheckedPool pool(std::move(o));
  const std::vector<TokenId> tokens{5, 6, 7, 8};
  auto a = pool.allocate(1);
  pool.cache_block(a[0], key_for(21, tokens, /*extra_digest=*/5, /*group=*/1));
  const BlockContentKey key = pool->cached_key(a[0]);
  EXPECT_EQ(key.hash, (BlockHash{21, 0}));
  EXPECT_EQ(key.parent, (BlockHash{1021, 0}));
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), key.tokens.begin(), key.tokens.end()));
  EXPECT_EQ(key.extra_digest, 5u);
  EXPECT_EQ(key.group, 1);
  EXPECT_EQ(key.parent_block, kUnknownParent);
  EXPECT_EQ(pool->find_cached(key), a[0]) << "a lower tier's copy of the key finds the block again";
}

TEST(CoreBlockPool, CacheBlockRefusesFreeBlocksAndPartialBlocks) {
  CheckedPool pool(pool_options(8, 4));
  const std::vector<TokenId> tokens{1, 2, 3, 4};
  const std::vector<TokenId> partial{1, 2};
  EXPECT_THROW(pool->cache_block(BlockId{3}, key_for(1, tokens)), UsageError) << "block 3 is free";
  EXPECT_THROW(pool->cache_block(pool->null_block(), key_for(1, tokens)), UsageError);
  auto a = pool.allocate(1);
  EXPECT_THROW(pool->cache_block(a[0], key_for(1, partial)), UsageError);
  pool.check();
  EXPECT_EQ(pool->num_cached_blocks(), 0);
  // Registering an already cached block again (a forked table) is a no-op.
  pool.cache_block(a[0], key_for(1, tokens));
  pool.cache_block(a[0], key_for(1, tokens));
  EXPECT_EQ(pool->num_cached_blocks(), 1);
  EXPECT_EQ(pool->stats().cached_blocks_stored, 1u);
}

TEST(CoreBlockPool, ReusingACachedFreeBlockEvictsItCountsItAndReportsIt) {
  BlockPoolOptions o = pool_options(4, 2, /*events=*/true);
  CheckedPool pool(std::move(o));
  std::vector<int32_t> evicted_seen;
  std::vector<TokenId> evicted_tokens;
  pool->set_uncache_listener([&](const KVCacheBlock& b, RemovalReason why) {
    EXPECT_EQ(why, RemovalReason::kEvicted);
    evicted_seen.push_back(b.id.value);
    EXPECT_TRUE(b.has_hash) << "the listener runs before the content is dropped";
    auto t = pool->cached_tokens(b.id);
    evicted_tokens.assign(t.begin(), t.end());
  });
  const std::vector<TokenId> tokens{5, 6};
  auto a = pool.allocate(1);  // block 1
  pool.cache_block(a[0], key_for(3, tokens));
  pool.free_blocks(a);  // free order: 2 3 1
  (void)pool->take_events();
  auto b = pool.allocate(2);  // 2 3: no eviction yet
  EXPECT_EQ(pool->stats().evictions, 0u);
  EXPECT_TRUE(pool->find_cached(key_for(3, tokens)).has_value());
  auto c = pool.allocate(1);  // 1: evicted
  EXPECT_EQ(c[0], a[0]);
  EXPECT_EQ(pool->stats().evictions, 1u);
  EXPECT_FALSE(pool->block(c[0]).has_hash);
  EXPECT_EQ(pool->num_cached_blocks(), 0);
  EXPECT_FALSE(pool->find_cached(key_for(3, tokens)).has_value());
  EXPECT_EQ(evicted_seen, (std::vector<int32_t>{1}));
  EXPECT_EQ(evicted_tokens, tokens);
  auto events = pool->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KVEventKind::kBlockRemoved);
  EXPECT_EQ(events[0].reason, RemovalReason::kEvicted);
  EXPECT_EQ(events[0].hash, (BlockHash{3, 0}));
  EXPECT_EQ(events[0].block, a[0]);
  EXPECT_TRUE(pool->take_events().empty()) << "draining empties the queue";
}

// A request's blocks are freed tail first, so eviction takes its private tail before its
// shared head; across requests, the least recently freed go first.
TEST(CoreBlockPool, EvictionFollowsFreeOrderLeastRecentlyUsedFirst) {
  CheckedPool pool(pool_options(7, 2, /*events=*/true));
  std::vector<std::vector<TokenId>> content;
  for (int i = 0; i < 6; ++i) content.push_back({i, i});
  auto a = pool.allocate(3);  // request A: 1 2 3
  auto b = pool.allocate(3);  // request B: 4 5 6
  for (int i = 0; i < 3; ++i)
    pool.cache_block(a[static_cast<size_t>(i)], key_for(static_cast<uint64_t>(i), content[static_cast<size_t>(i)]));
  for (int i = 0; i < 3; ++i)
    pool.cache_block(b[static_cast<size_t>(i)],
                     key_for(static_cast<uint64_t>(i + 3), content[static_cast<size_t>(i + 3)]));
  pool.free_blocks({a[2], a[1], a[0]});  // A finishes first, tail first
  pool.free_blocks({b[2], b[1], b[0]});
  EXPECT_EQ(free_order(pool.raw()), (std::vector<int32_t>{3, 2, 1, 6, 5, 4}));
  (void)pool->take_events();
  std::vector<BlockId> got;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(pool.try_allocate(1, got));
  std::vector<uint64_t> evicted_hashes;
  for (const KVEvent& e : pool->take_events()) evicted_hashes.push_back(e.hash.lo);
  EXPECT_EQ(evicted_hashes, (std::vector<uint64_t>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(pool->stats().evictions, 6u);
}

TEST(CoreBlockPool, EqualHashesChainAndTheEarliestCachedWins) {
  CheckedPool pool(pool_options(8, 2));
  const std::vector<TokenId> t{7, 8};
  auto a = pool.allocate(3);  // 1 2 3: the same content cached three times
  for (BlockId b : a) pool.cache_block(b, key_for(5, t));
  EXPECT_EQ(pool->num_cached_blocks(), 3);
  EXPECT_EQ(*pool->find_cached(key_for(5, t)), BlockId{1});
  // Evict the middle of the chain, then the head: the rest stays reachable, in order.
  pool.free_blocks({a[1]});
  std::vector<BlockId> rest;
  ASSERT_TRUE(pool.try_allocate(4, rest));  // 4 5 6 7
  ASSERT_TRUE(pool.try_allocate(1, rest));  // 2: evicted from the middle of the chain
  EXPECT_EQ(rest.back(), BlockId{2});
  EXPECT_EQ(*pool->find_cached(key_for(5, t)), BlockId{1});
  pool.free_blocks({a[0]});
  ASSERT_TRUE(pool.try_allocate(1, rest));  // 1: the head
  EXPECT_EQ(*pool->find_cached(key_for(5, t)), BlockId{3});
  EXPECT_EQ(pool->num_cached_blocks(), 1);
}

TEST(CoreBlockPool, ResetDropsEveryUnusedEntryAndReportsBlocksInUse) {
  CheckedPool pool(pool_options(8, 2, /*events=*/true));
  std::vector<std::vector<TokenId>> content{{1, 1}, {2, 2}, {3, 3}};
  auto a = pool.allocate(3);
  for (size_t i = 0; i < 3; ++i) pool.cache_block(a[i], key_for(i, content[i]));
  pool.free_blocks({a[0], a[1]});  // a[2] stays in use
  (void)pool->take_events();
  ResetResult partial = pool.reset_prefix_cache();
  EXPECT_EQ(partial.removed, 2);
  EXPECT_EQ(partial.kept_in_use, 1);
  EXPECT_FALSE(partial.complete());
  EXPECT_EQ(pool->num_cached_blocks(), 1);
  EXPECT_FALSE(pool->find_cached(key_for(0, content[0])).has_value());
  EXPECT_TRUE(pool->find_cached(key_for(2, content[2])).has_value());
  EXPECT_EQ(pool->stats().reset_removals, 2u);
  EXPECT_EQ(pool->num_free_blocks(), 6) << "reset frees no blocks, it forgets content";
  auto events = pool->take_events();
  ASSERT_EQ(events.size(), 2u) << "a partial reset reports each removal";
  for (const KVEvent& e : events) {
    EXPECT_EQ(e.kind, KVEventKind::kBlockRemoved);
    EXPECT_EQ(e.reason, RemovalReason::kReset);
  }
  pool.free_blocks({a[2]});
  ResetResult full = pool.reset_prefix_cache();
  EXPECT_EQ(full.removed, 1);
  EXPECT_EQ(full.kept_in_use, 0);
  EXPECT_TRUE(full.complete());
  EXPECT_EQ(pool->num_cached_blocks(), 0);
  events = pool->take_events();
  ASSERT_EQ(events.size(), 1u) << "a complete reset is one all-cleared event";
  EXPECT_EQ(events[0].kind, KVEventKind::kAllBlocksCleared);
  // Reset content is not an eviction.
  EXPECT_EQ(pool->stats().evictions, 0u);
  std::vector<BlockId> all;
  ASSERT_TRUE(pool.try_allocate(7, all));
  EXPECT_EQ(pool->stats().evictions, 0u);
}

TEST(CoreBlockPool, CachingDisabledNeverCaches) {
  BlockPoolOptions o = pool_options(8, 2);
  o.enable_caching = false;
  CheckedPool pool(std::move(o));
  const std::vector<TokenId> t{1, 2};
  auto a = pool.allocate(1);
  pool.cache_block(a[0], key_for(1, t));
  EXPECT_EQ(pool->num_cached_blocks(), 0);
  EXPECT_FALSE(pool->find_cached(key_for(1, t)).has_value());
  EXPECT_FALSE(pool->caching_enabled());
}

TEST(CoreBlockPool, NoBlockIsEverBothFreeAndOwned) {
  // The checker's core promise, exercised through a mix of operations: a block is in the free
  // queue exactly when its ref count is 0.
  CheckedPool pool(pool_options(16, 2));
  std::vector<std::vector<BlockId>> owners;
  for (int round = 0; round < 50; ++round) {
    std::vector<BlockId> got;
    if (pool.try_allocate(1 + round % 3, got)) owners.push_back(got);
    if (round % 4 == 3 && !owners.empty()) {
      pool.touch(owners.front());
      owners.push_back(owners.front());
    }
    if (round % 3 == 2 && !owners.empty()) {
      pool.free_blocks(owners.back());
      owners.pop_back();
    }
    for (const KVCacheBlock& b : pool->blocks())
      if (!b.is_null) {
        ASSERT_EQ(b.in_free_queue, b.ref_cnt == 0) << "block " << b.id.value;
      }
  }
}

TEST(CoreBlockPool, CheckerCatchesACorruptedBlock) {
  // The checker itself must not be vacuous: corrupt a ref count behind the pool's back.
  BlockPool pool(pool_options(8, 2));
  std::vector<BlockId> got;
  ASSERT_TRUE(pool.allocate(1, got));
  pool.check_invariants();
  auto& forged = const_cast<KVCacheBlock&>(pool.block(got[0]));
  forged.ref_cnt = 0;  // owned by nobody, yet outside the free queue
  EXPECT_THROW(pool.check_invariants(), InvariantError);
  forged.ref_cnt = 1;
  pool.check_invariants();
}

TEST(CoreBlockPool, FreeTailFirstReleasesTheTableBackwards) {
  CheckedPool pool(pool_options(8, 4));
  auto a = pool.allocate(3);  // 1 2 3
  pool->free_blocks_tail_first(a);
  pool.check();
  EXPECT_EQ(free_order(pool.raw()), cat(range(4, 7), {3, 2, 1}));
  // A double free is refused and changes nothing, as with free_blocks.
  auto b = pool.allocate(2);  // 4 5
  const auto order = free_order(pool.raw());
  EXPECT_THROW(pool->free_blocks_tail_first(std::vector<BlockId>{b[0], BlockId{3}, b[1]}), UsageError);
  pool.check();
  EXPECT_EQ(free_order(pool.raw()), order);
  EXPECT_EQ(pool->block(b[0]).ref_cnt, 1);
  EXPECT_EQ(pool->block(b[1]).ref_cnt, 1);
}

}  // namespace
}  // namespace pagedkv
