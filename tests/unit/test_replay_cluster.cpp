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

// Requests in pagedkv JSONL with explicit arrivals and latencies.
Trace token_trace(const std::string& text) {
  std::istringstream in(text);
  return read_token_trace(in, "tokens");
}

std::string tokens_line(double t_ms, int first, int n, double latency_ms, int output = 0) {
  std::ostringstream s;
  s << "{\"timestamp\": " << t_ms << ", \"output_length\": " << output << ", \"tokens\": [";
  for (int i = 0; i < n; ++i) s << (i ? "," : "") << first + i;
  s << "]";
  if (latency_ms >= 0) s << ", \"latency_ms\": " << latency_ms;
  s << "}\n";
  return s.str();
}

TEST(ClusterReplay, KvRouterFollowsPrefixesUntilLoadOutweighsThem) {
  ClusterReplayConfig c = config(2, RouterKind::kKv, 1000);
  c.block_size = 4;
  c.prefill_scale = 1.0;
  c.run_global = false;
  // Request 0 (8 blocks) goes to instance 0 (rotation starts there). Request 1 shares its 8
  // blocks and arrives while request 0 is in flight (holding 8 + 2 output = 10 blocks): cost on
  // instance 0 = (9 - 8) + 10 = 11, on instance 1 = 9. It goes to instance 1.
  {
    const Trace t = token_trace(tokens_line(0, 1, 32, 100, 8) + tokens_line(10, 1, 36, 100));
    const ClusterReplayResult r = replay_cluster(t, c);
    EXPECT_EQ(r.per_instance[0].requests, 1);
    EXPECT_EQ(r.per_instance[1].requests, 1);
    EXPECT_EQ(r.local.hit_blocks, 0);
  }
  // The same, but request 0 finished (latency 5 ms) before request 1 arrived: its prefix wins.
  {
    const Trace t = token_trace(tokens_line(0, 1, 32, 5, 8) + tokens_line(10, 1, 36, 100));
    const ClusterReplayResult r = replay_cluster(t, c);
    EXPECT_EQ(r.per_instance[0].requests, 2);
    EXPECT_EQ(r.local.hit_blocks, 8);
  }
  // A larger prefill scale values the prefix over the load: 3 * 1 + 10 = 13 < 3 * 9 = 27.
  {
    c.prefill_scale = 3;
    const Trace t = token_trace(tokens_line(0, 1, 32, 100, 8) + tokens_line(10, 1, 36, 100));
    const ClusterReplayResult r = replay_cluster(t, c);
    EXPECT_EQ(r.per_instance[0].requests, 2);
  }
  EXPECT_EQ(parse_router("kv"), RouterKind::kKv);
  EXPECT_EQ(router_name(RouterKind::kKv), "kv");
}

TEST(ClusterReplay, KvRouterSpreadsAnIdleClusterAndFollowsConversations) {
  const Trace trace = conversation_trace(6, 8);  // no latencies: nothing is ever in flight
  const ClusterReplayResult rr = replay_cluster(trace, config(4, RouterKind::kRoundRobin, 1000));
  const ClusterReplayResult kv = replay_cluster(trace, config(4, RouterKind::kKv, 1000));
  EXPECT_GT(kv.local.hit_blocks, rr.local.hit_blocks);
  for (const InstanceTotals& t : kv.per_instance) EXPECT_GT(t.requests, 0);
}

}  // namespace
}  // namespace pagedkv
