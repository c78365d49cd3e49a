// Metrics (prefix-cache queries and hits at token and request level, blocks in use / cached /
// free, usage, evictions) and KV events (stored with hash, parent and token count; removed with
// a reason; all cleared) that routers drain. Every operation runs the checker.
#include <gtest/gtest.h>

#include "core_test_support.h"

namespace pagedkv {
namespace {

using testing::CheckedManager;
using testing::concat;
using testing::full_attention_config;
using testing::iota_tokens;

KVCacheManagerConfig with_events(int num_blocks, int block_size) {
  auto c = full_attention_config(num_blocks, block_size);
  c.enable_events = true;
  return c;
}

TEST(CoreEventsMetrics, StoredEventsCarryHashParentAndTokenCount) {
  CheckedManager m(with_events(16, 4));
  Request a(RequestId{1}, iota_tokens(9, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  const auto t = m.table(a);
  auto events = m->take_events();
  ASSERT_EQ(events.size(), 2u) << "two full blocks cached, the partial one not";
  const KVEvent& e0 = events[0];
  EXPECT_EQ(e0.kind, KVEventKind::kBlockStored);
  EXPECT_EQ(e0.hash, a.block_hashes[0]);
  EXPECT_FALSE(e0.has_parent) << "a request's first block has no parent block";
  EXPECT_EQ(e0.token_count, 4);
  EXPECT_EQ(e0.block, BlockId{t[0]});
  EXPECT_EQ(e0.group, 0);
  EXPECT_EQ(e0.medium, Medium::kDevice);
  const KVEvent& e1 = events[1];
  EXPECT_EQ(e1.kind, KVEventKind::kBlockStored);
  EXPECT_EQ(e1.hash, a.block_hashes[1]);
  EXPECT_TRUE(e1.has_parent);
  EXPECT_EQ(e1.parent_hash, a.block_hashes[0]) << "routers rebuild the chain from parent links";
  EXPECT_EQ(e1.block, BlockId{t[1]});
  EXPECT_TRUE(m->take_events().empty()) << "draining empties the queue";
}

TEST(CoreEventsMetrics, DecodeStoresBlocksAsTheyFill) {
  CheckedManager m(with_events(16, 4));
  Request a(RequestId{1}, iota_tokens(7, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  EXPECT_EQ(m->take_events().size(), 1u);
  ASSERT_TRUE(m.decode(a, 100).has_value());  // 8 tokens: block 1 fills
  auto events = m->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].hash, a.block_hashes[1]);
  EXPECT_EQ(events[0].parent_hash, a.block_hashes[0]);
}

TEST(CoreEventsMetrics, EvictionAndResetAreReportedWithTheirReason) {
  CheckedManager m(with_events(5, 4));  // 4 usable
  Request a(RequestId{1}, iota_tokens(8, 0));
  ASSERT_TRUE(m.admit(a).has_value());  // blocks 1 2, both cached
  m.free(a);  // free: 3 4 2 1
  (void)m->take_events();
  Request b(RequestId{2}, iota_tokens(12, 100));
  ASSERT_TRUE(m.admit(b).has_value());  // takes 3 4 2: evicts A's block 1 (table entry 1)
  auto events = m->take_events();
  ASSERT_EQ(events.size(), 1u + 3u);
  EXPECT_EQ(events[0].kind, KVEventKind::kBlockRemoved);
  EXPECT_EQ(events[0].reason, RemovalReason::kEvicted);
  EXPECT_EQ(events[0].hash, a.block_hashes[1]);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(events[i].kind, KVEventKind::kBlockStored);
  EXPECT_EQ(m->pool().stats().evictions, 1u);

  // A partial reset lists each removal; a complete one says "all cleared" once.
  ResetResult r = m.reset_prefix_cache();
  EXPECT_EQ(r.removed, 1);
  EXPECT_EQ(r.kept_in_use, 3);
  events = m->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KVEventKind::kBlockRemoved);
  EXPECT_EQ(events[0].reason, RemovalReason::kReset);
  EXPECT_EQ(events[0].hash, a.block_hashes[0]);
  m.free(b);
  r = m.reset_prefix_cache();
  EXPECT_TRUE(r.complete());
  events = m->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KVEventKind::kAllBlocksCleared);
  EXPECT_EQ(kv_event_kind_name(KVEventKind::kAllBlocksCleared), "all_cleared");
  EXPECT_EQ(removal_reason_name(RemovalReason::kEvicted), "evicted");
  EXPECT_EQ(medium_name(Medium::kDisk), "disk");
}

TEST(CoreEventsMetrics, EventsAreOffUnlessEnabled) {
  CheckedManager m(full_attention_config(16, 4));
  Request a(RequestId{1}, iota_tokens(9, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  m.free(a);
  m.reset_prefix_cache();
  EXPECT_FALSE(m->pool().events_enabled());
  EXPECT_TRUE(m->take_events().empty());
}

TEST(CoreEventsMetrics, PrefixCacheStatsCountTokensAndRequests) {
  CheckedManager m(full_attention_config(32, 4));
  Request a(RequestId{1}, iota_tokens(10, 0));
  ASSERT_EQ(m.admit(a), 0);
  Request b(RequestId{2}, concat(iota_tokens(8, 0), {50, 51, 52, 53, 54}));
  ASSERT_EQ(m.admit(b), 8);
  Request c(RequestId{3}, iota_tokens(6, 1000));
  ASSERT_EQ(m.admit(c), 0);
  const PrefixCacheStats& s = m->prefix_cache_stats();
  EXPECT_EQ(s.requests, 3u) << "lookups";
  EXPECT_EQ(s.hit_requests, 1u) << "lookups that found at least one block";
  EXPECT_EQ(s.queries, 10u + 13u + 6u) << "tokens looked up";
  EXPECT_EQ(s.hits, 8u) << "tokens found";
  EXPECT_DOUBLE_EQ(s.hit_rate(), 8.0 / 29.0);
  EXPECT_DOUBLE_EQ(PrefixCacheStats{}.hit_rate(), 0.0);
}

TEST(CoreEventsMetrics, BlockCountsAndUsage) {
  CheckedManager m(full_attention_config(11, 4));  // 10 usable
  Request a(RequestId{1}, iota_tokens(10, 0));  // 3 blocks, 2 cached
  Request b(RequestId{2}, iota_tokens(9, 0));  // shares 2, 1 own
  ASSERT_TRUE(m.admit(a).has_value());
  ASSERT_TRUE(m.admit(b).has_value());
  const BlockPool& p = m->pool();
  EXPECT_EQ(p.num_free_blocks(), 6);
  EXPECT_EQ(p.num_usable_blocks() - p.num_free_blocks(), 4) << "blocks in use";
  EXPECT_EQ(p.num_cached_blocks(), 2);
  EXPECT_DOUBLE_EQ(m->usage(), 0.4);
  EXPECT_EQ(p.stats().allocated_blocks, 4u);
  EXPECT_EQ(p.stats().cached_blocks_stored, 2u);
  m.free(a);
  m.free(b);
  EXPECT_EQ(p.num_free_blocks(), 10);
  EXPECT_EQ(p.num_cached_blocks(), 2) << "freed blocks keep their content";
  ResetResult r = m.reset_prefix_cache();
  EXPECT_EQ(r.removed, 2);
  EXPECT_EQ(p.stats().reset_removals, 2u);
  EXPECT_EQ(p.stats().evictions, 0u);
}

}  // namespace
}  // namespace pagedkv
