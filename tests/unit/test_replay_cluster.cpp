// Cluster replay: N instances with their own caches and a router against one global cache.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "pagedkv/core/error.h"
#include "pagedkv/replay/cluster_replay.h"
#include "pagedkv/replay/trace_reader.h"

namespace pagedkv {
namespace {

// `groups` conversations, each a growing chain of ids (turn t repeats turns 0..t-1 and adds
// one block), interleaved round-robin: the shape of the Mooncake conversation trace.
Trace conversation_trace(int groups, int turns) {
  std::string text;
  for (int t = 0; t < turns; ++t) {
    for (int g = 0; g < groups; ++g) {
      text += "{\"input_length\": " + std::to_string((t + 1) * 512) + ", \"hash_ids\": [";
      for (int k = 0; k <= t; ++k) {
        if (k) text += ",";
        text += std::to_string(g * 1000 + k);
      }
      text += "]}\n";
    }
  }
  std::istringstream in(text);
  return read_mooncake_trace(in, "conv");
}

ClusterReplayConfig config(int instances, RouterKind router, int64_t capacity) {
  ClusterReplayConfig c;
  c.block_size = 128;
  c.instances = instances;
  c.router = router;
  c.capacity_blocks_per_instance = capacity;
  return c;
}

TEST(ClusterReplay, OneInstanceIsTheGlobalCache) {
  const Trace trace = conversation_trace(6, 8);
  const ClusterReplayResult r = replay_cluster(trace, config(1, RouterKind::kRoundRobin, 64));
  ASSERT_TRUE(r.global);
  EXPECT_EQ(r.local.hit_blocks, r.global->hit_blocks);
  EXPECT_EQ(r.local.evictions, r.global->evictions);
  EXPECT_EQ(r.local.prompt_tokens, r.global->prompt_tokens);
}

TEST(ClusterReplay, CacheAwareRoutingFollowsConversations) {
  // 6 conversations over 3 instances: round-robin scatters each conversation's turns over
  // instances; cache-aware sends a turn back to the instance holding its history.
  const Trace trace = conversation_trace(6, 8);
  const int64_t roomy = 1000;
  const ClusterReplayResult rr = replay_cluster(trace, config(4, RouterKind::kRoundRobin, roomy));
  const ClusterReplayResult ca = replay_cluster(trace, config(4, RouterKind::kCacheAware, roomy));
  EXPECT_GT(ca.local.hit_blocks, rr.local.hit_blocks);
  // With room for everything the global cache hits every repeated block, the upper bound.
  EXPECT_GE(rr.global->hit_blocks, ca.local.hit_blocks);
  EXPECT_EQ(ca.global->hit_blocks, rr.global->hit_blocks);
  // The balance bound keeps every instance busy.
  for (const InstanceTotals& t : ca.per_instance) EXPECT_GT(t.requests, 0);
  int64_t routed = 0;
  for (const InstanceTotals& t : ca.per_instance) routed += t.requests;
  EXPECT_EQ(routed, static_cast<int64_t>(trace.size()));
}

TEST(ClusterReplay, GlobalPoolBeatsScatteredLocalPools) {
  const Trace trace = conversation_trace(13, 10);  // 13 groups on 4 instances: turns scatter
  const ClusterReplayResult r = replay_cluster(trace, config(4, RouterKind::kRoundRobin, 40));
  EXPECT_GT(r.global->token_hit_rate(), r.local.token_hit_rate());
  EXPECT_LT(ClusterReplayResult::prefill_tokens_per_request(*r.global),
            ClusterReplayResult::prefill_tokens_per_request(r.local));
  EXPECT_EQ(r.global->capacity_blocks, 160);
}

TEST(ClusterReplay, RejectsBadConfigurations) {
  const Trace trace = conversation_trace(2, 2);
  EXPECT_THROW(replay_cluster(trace, config(0, RouterKind::kRoundRobin, 10)), ConfigError);
  ClusterReplayConfig c = config(2, RouterKind::kCacheAware, 10);
  c.balance_slack = -1;
  EXPECT_THROW(replay_cluster(trace, c), ConfigError);
  EXPECT_EQ(parse_router("cache-aware"), RouterKind::kCacheAware);
  EXPECT_FALSE(parse_router("random"));
}

}  // namespace
}  // namespace pagedkv
