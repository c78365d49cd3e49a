// The router's decisions on synthetic indexes (exact expected backends), its index of blocks by
// medium, and the parsing of backend addresses.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <thread>

#include "pagedkv/api/kv_events_wire.h"
#include "pagedkv/core/error.h"
#include "pagedkv/router/backend_pool.h"
#include "pagedkv/router/kv_index.h"
#include "pagedkv/router/routing_policy.h"

namespace pagedkv::router {
namespace {

std::vector<BlockHash> chain(int n, uint64_t base = 100) {
  std::vector<BlockHash> h;
  for (int i = 0; i < n; ++i) h.push_back(BlockHash{base + static_cast<uint64_t>(i), 1});
  return h;
}

TEST(KVIndex, OverlapIsTheLeadingRunByBestMedium) {
  KVIndex index(2);
  const auto h = chain(6);
  index.apply(0, h[0], Medium::kDevice, true);
  index.apply(0, h[1], Medium::kHost, true);
  index.apply(0, h[1], Medium::kDisk, true);
  index.apply(0, h[2], Medium::kDisk, true);
  index.apply(0, h[4], Medium::kDevice, true);  // after a gap: worth nothing
  EXPECT_EQ(index.overlap(0, h), (PrefixOverlap{1, 1, 1}));
  EXPECT_EQ(index.overlap(1, h), PrefixOverlap{});
  index.apply(0, h[1], Medium::kHost, false);  // still on disk
  EXPECT_EQ(index.overlap(0, h), (PrefixOverlap{1, 0, 2}));
  index.apply(0, h[0], Medium::kDevice, false);
  EXPECT_EQ(index.overlap(0, h).blocks(), 0);
  EXPECT_EQ(index.size(0, Medium::kDisk), 2u);
  EXPECT_EQ(index.size(0, Medium::kDevice), 1u);
  index.apply(0, h[5], Medium::kHost, false);  // absent: ignored
  index.apply(0, h[2], Medium::kDisk, true);  // twice: one entry
  EXPECT_EQ(index.size(0, Medium::kDisk), 2u);
}

TEST(KVIndex, SnapshotReplacesAndClearForgets) {
  KVIndex index(2);
  const auto h = chain(3);
  index.apply(1, h[2], Medium::kDevice, true);
  const std::vector<std::pair<BlockHash, MediumMask>> snap{
      {h[0], medium_bit(Medium::kDevice) | medium_bit(Medium::kHost)}, {h[1], medium_bit(Medium::kHost)}};
  index.replace(1, snap);
  EXPECT_EQ(index.overlap(1, h), (PrefixOverlap{1, 1, 0}));
  EXPECT_EQ(index.find(1, h[2]), 0);
  EXPECT_EQ(index.size(1, Medium::kHost), 2u);
  index.clear(1);
  EXPECT_EQ(index.size(1, Medium::kHost), 0u);
  EXPECT_THROW(index.overlap(2, h), UsageError);
}

BackendView view(PrefixOverlap o, int64_t load = 0, int in_flight = 0, bool healthy = true) {
  return BackendView{healthy, o, load, in_flight};
}

TEST(RoutingPolicy, KvPicksTheLongestPrefix) {
  BackendChooser kv(RoutingPolicy::kKv);
  std::vector<BackendView> v{view({2, 0, 0}), view({7, 0, 0}), view({5, 0, 0})};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(kv.choose(v, 10), 1);
}

const RoutingWeights kUnitScale{1.0, 1.0, 0.75, 0.25};

TEST(RoutingPolicy, KvWeighsLoadAgainstOverlap) {
  BackendChooser kv(RoutingPolicy::kKv, kUnitScale);
  // Backend 0 holds 8 of 10 blocks but carries 20 blocks of load: cost 2 + 20 = 22; backend 1
  // holds nothing and is idle: cost 10. Backend 1 wins.
  std::vector<BackendView> v{view({8, 0, 0}, 20), view({}, 0)};
  EXPECT_EQ(kv.choose(v, 10), 1);
  // With load 5 instead: 2 + 5 = 7 < 10: backend 0.
  v[0].load_blocks = 5;
  EXPECT_EQ(kv.choose(v, 10), 0);
  // A larger prefill scale makes the prefix worth more: 3*2 + 20 = 26 < 3*10 = 30.
  BackendChooser heavy(RoutingPolicy::kKv, RoutingWeights{3.0, 1.0, 0.75, 0.25});
  v[0].load_blocks = 20;
  EXPECT_EQ(heavy.choose(v, 10), 0);
}

TEST(RoutingPolicy, LowerTiersAreCreditedLess) {
  BackendChooser kv(RoutingPolicy::kKv);
  // 6 blocks on the host (credit 4.5) beat 4 on the device (4.0); 8 on disk (2.0) lose to both.
  std::vector<BackendView> v{view({4, 0, 0}), view({0, 6, 0}), view({0, 0, 8})};
  EXPECT_EQ(kv.choose(v, 10), 1);
  EXPECT_DOUBLE_EQ(overlap_credit({1, 2, 4}, RoutingWeights{}), 1.0 + 1.5 + 1.0);
  EXPECT_DOUBLE_EQ(kv_cost(10, view({1, 2, 4}, 3), kUnitScale), 10 - 3.5 + 3);
  EXPECT_DOUBLE_EQ(kv_cost(10, view({1, 2, 4}, 3), RoutingWeights{}), 2 * (10 - 3.5) + 3);  // the default scale
  EXPECT_DOUBLE_EQ(kv_cost(2, view({4, 0, 0}, 1), RoutingWeights{}), 1);  // never below the load
}

TEST(RoutingPolicy, UnhealthyBackendsAreNeverChosen) {
  for (RoutingPolicy p :
       {RoutingPolicy::kKv, RoutingPolicy::kRoundRobin, RoutingPolicy::kLeastLoad, RoutingPolicy::kRandom}) {
    BackendChooser c(p, {}, 9);
    std::vector<BackendView> v{view({9, 0, 0}, 0, 0, false), view({}, 50), view({}, 0, 0, false)};
    for (int i = 0; i < 20; ++i) EXPECT_EQ(c.choose(v, 10), 1) << routing_policy_name(p);
    v[1].healthy = false;
    EXPECT_EQ(c.choose(v, 10), -1) << routing_policy_name(p);
  }
}

TEST(RoutingPolicy, TiesGoToFewerInFlightThenRotate) {
  BackendChooser kv(RoutingPolicy::kKv);
  std::vector<BackendView> v{view({}, 4, 3), view({}, 4, 1), view({}, 4, 2)};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(kv.choose(v, 3), 1);
  // All equal: an idle cluster with an empty index is spread, not sent to backend 0.
  std::vector<BackendView> idle(3);
  std::map<int, int> count;
  for (int i = 0; i < 30; ++i) ++count[kv.choose(idle, 3)];
  EXPECT_EQ(count[0], 10);
  EXPECT_EQ(count[1], 10);
  EXPECT_EQ(count[2], 10);
}

TEST(RoutingPolicy, ASessionsBackendWinsTiesOnly) {
  for (RoutingPolicy p : {RoutingPolicy::kKv, RoutingPolicy::kLeastLoad}) {
    BackendChooser c(p);
    std::vector<BackendView> idle(3);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(c.choose(idle, 3, 2), 2) << routing_policy_name(p);
    // Even with more requests in flight there: affinity comes before the in-flight tie-break.
    idle[2].in_flight = 5;
    EXPECT_EQ(c.choose(idle, 3, 2), 2) << routing_policy_name(p);
    // Not when it costs more, nor when it is down.
    std::vector<BackendView> loaded{view({}, 0), view({}, 0), view({}, 8)};
    EXPECT_NE(c.choose(loaded, 3, 2), 2) << routing_policy_name(p);
    idle[2].healthy = false;
    EXPECT_NE(c.choose(idle, 3, 2), 2) << routing_policy_name(p);
  }
}

TEST(RoutingPolicy, RoundRobinLeastLoadAndRandom) {
  BackendChooser rr(RoutingPolicy::kRoundRobin);
  std::vector<BackendView> v{view({9, 0, 0}), view({}, 0, 0, false), view({}), view({})};
  std::vector<int> order;
  for (int i = 0; i < 6; ++i) order.push_back(rr.choose(v, 10));
  EXPECT_EQ(order, (std::vector<int>{0, 2, 3, 0, 2, 3}));

  BackendChooser ll(RoutingPolicy::kLeastLoad);
  std::vector<BackendView> loads{view({9, 0, 0}, 30), view({}, 10), view({}, 20)};
  EXPECT_EQ(ll.choose(loads, 10), 1);  // the prefix on 0 does not matter

  BackendChooser a(RoutingPolicy::kRandom, {}, 5), b(RoutingPolicy::kRandom, {}, 5);
  std::map<int, int> count;
  for (int i = 0; i < 300; ++i) {
    const int x = a.choose(v, 10);
    EXPECT_EQ(x, b.choose(v, 10)) << "seeded: runs repeat";
    ++count[x];
  }
  EXPECT_EQ(count[1], 0);
  for (int i : {0, 2, 3}) EXPECT_GT(count[i], 60);
}

TEST(RoutingPolicy, Names) {
  for (RoutingPolicy p :
       {RoutingPolicy::kKv, RoutingPolicy::kRoundRobin, RoutingPolicy::kLeastLoad, RoutingPolicy::kRandom})
    EXPECT_EQ(parse_routing_policy(routing_policy_name(p)), p);
  EXPECT_FALSE(parse_routing_policy("cache-aware"));
}

TEST(BackendAddress, ParsesHttpHostPortOnly) {
  const BackendAddress a = BackendAddress::parse("http://127.0.0.1:8001/");
  EXPECT_EQ(a.url, "http://127.0.0.1:8001");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 8001);
  EXPECT_EQ(BackendAddress::parse("http://[::1]:9").host, "::1");
  for (const char* bad : {"127.0.0.1:8001", "https://h:1", "http://h", "http://h:0", "http://h:70000", "http://h:8x",
                          "http://h:1/v1", "http://:5"})
    EXPECT_THROW(BackendAddress::parse(bad), ConfigError) << bad;
}

// A hybrid backend publishes every group's blocks; the router indexes only the routing group
// (the full-attention one, here group 1): a hash cached only by the sliding group earns no
// prefix credit, one of the full group does, from a snapshot and from events alike.
TEST(BackendPool, IndexesOnlyTheRoutingGroupOfAHybridBackend) {
  using namespace std::chrono_literals;
  PrefixHashing hashing;
  hashing.groups = {api::KVGroupInfo{AttentionKind::kSlidingWindow, 64, 16},
                    api::KVGroupInfo{AttentionKind::kFull, 0, 16}};
  hashing.routing_group = 1;
  const BlockHash full_only{1, 1}, sliding_only{2, 2}, both{3, 3}, later{4, 4};
  api::KVEventsPage snapshot;
  snapshot.epoch = 5;
  snapshot.last_seq = 4;
  snapshot.snapshot = true;
  const MediumMask device = medium_bit(Medium::kDevice);
  snapshot.blocks = {{full_only, device, 1}, {sliding_only, device, 0}, {both, device, 0}, {both, device, 1}};
  api::KVEventsPage events;  // after the snapshot: `later` in the sliding group only
  events.epoch = 5;
  events.last_seq = 5;
  events.events = {{5, true, later, Medium::kDevice, 0}};
  httplib::Server backend;
  backend.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  backend.Get("/kv_events", [&](const httplib::Request& req, httplib::Response& res) {
    const bool caught_up = req.get_param_value("epoch") == "5" && req.get_param_value("since") == "4";
    api::KVEventsPage page = caught_up ? events : snapshot;
    if (req.get_param_value("since") == "5" && req.get_param_value("epoch") == "5") {
      page = events;
      page.events.clear();
    }
    res.set_content(api::format_kv_events_page(page, hashing), "application/json");
  });
  const int port = backend.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { backend.listen_after_bind(); });
  {
    BackendPoolOptions options;
    options.events_interval = 5ms;
    options.health_interval = 20ms;
    BackendPool pool({BackendAddress::parse("http://127.0.0.1:" + std::to_string(port))}, options);
    pool.start();
    ASSERT_TRUE(pool.wait_until_checked(5s));
    for (int i = 0; i < 500 && pool.states()[0].events == 0; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_GT(pool.states()[0].events, 0u) << "the pool read the snapshot and the events after it";
    ASSERT_TRUE(pool.hashing().has_value());
    EXPECT_EQ(pool.hashing()->routing_group, 1);
    auto device_overlap = [&](const BlockHash& h) { return pool.views(std::vector<BlockHash>{h})[0].overlap.device; };
    EXPECT_EQ(device_overlap(full_only), 1);
    EXPECT_EQ(device_overlap(both), 1);
    EXPECT_EQ(device_overlap(sliding_only), 0);
    EXPECT_EQ(device_overlap(later), 0);
    pool.stop();
  }
  backend.stop();
  serving.join();
}

}  // namespace
}  // namespace pagedkv::router
