// RedisClusterStore and the remote tier against a real 6-node Redis Cluster (3 masters, 3
// replicas) the test starts itself on loopback ports with temporary directories
// (redis_test_cluster.h), shared by the tests in order: keys spread over the masters and read
// back byte for byte (also from replicas, and through a redis:// URL that detects the cluster);
// a slot migration under load (ASK and MOVED followed, no wrong value); a master killed with
// kill -9 mid-run (its slots miss, the others hit, the replica is promoted and hits resume); two
// tiered caches sharing prefixes through the cluster with a master killed mid-run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "pagedkv/remote/cluster_slots.h"
#include "pagedkv/remote/redis_auto_store.h"
#include "pagedkv/remote/redis_cluster_store.h"
#include "pagedkv/tiers/remote_value_format.h"
#include "redis_test_cluster.h"
#include "tiers_test_support.h"

namespace pagedkv {
namespace {

using namespace pagedkv::testing;
using remote::RedisClusterStore;
using Clock = std::chrono::steady_clock;

// Started by the first test that needs it, stopped by the environment below (or, should the test
// crash, by the servers' parent-death signal).
RedisTestCluster* started_cluster = nullptr;
RedisTestCluster& cluster() {
  if (!started_cluster) started_cluster = new RedisTestCluster();
  return *started_cluster;
}
struct StopCluster : ::testing::Environment {
  void TearDown() override {
    delete started_cluster;
    started_cluster = nullptr;
  }
};
[[maybe_unused]] const auto* const kStop = ::testing::AddGlobalTestEnvironment(new StopCluster);

// A TCP server on loopback that answers every connection with an HTTP error page, then closes it.
class GarbageServer {
 public:
  GarbageServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen on loopback");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shut down
        const char page[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        [[maybe_unused]] const ssize_t n = ::send(c, page, sizeof(page) - 1, MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~GarbageServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

remote::RedisClusterStoreOptions cluster_options(bool replicas = false) {
  remote::RedisClusterStoreOptions o;
  o.seeds = remote::parse_redis_cluster_url(cluster().url());
  o.connect_timeout = o.io_timeout = std::chrono::milliseconds(500);
  o.read_from_replicas = replicas;
  return o;
}

// A value that is a pure function of its key: a wrong value is always detected.
std::vector<std::byte> value_of(const std::string& key, size_t n) {
  std::vector<std::byte> v(n);
  uint64_t x = std::hash<std::string>{}(key);
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  return v;
}

std::vector<std::string> block_keys(int n, uint64_t seed) {
  std::vector<std::string> keys;
  BlockHash fp{0x1234, 0x5678};
  for (int i = 0; i < n; ++i)
    keys.push_back(remote_block_key("pagedkv", fp, BlockHash{seed, static_cast<uint64_t>(i)}));
  return keys;
}

RemoteStatus set_all(RemoteStore& s, const std::vector<std::string>& keys, size_t bytes, std::vector<uint8_t>& stored) {
  std::vector<std::vector<std::byte>> values;
  std::vector<std::span<const std::byte>> spans;
  for (const std::string& k : keys) values.push_back(value_of(k, bytes));
  for (const auto& v : values) spans.emplace_back(v);
  return s.set(keys, spans, stored);
}

// GETs `keys`: how many came back, and how many of those were not the value written (never allowed).
struct Loaded {
  RemoteStatus status;
  int found = 0, wrong = 0;
  std::vector<uint8_t> present;
};
Loaded get_all(RemoteStore& s, const std::vector<std::string>& keys, size_t bytes) {
  Loaded l;
  l.present.assign(keys.size(), 0);
  l.status = s.get(keys, [&](size_t i, std::span<const std::byte> v) {
    ++l.found;
    l.present[i] = 1;
    if (!std::ranges::equal(v, value_of(keys[i], bytes))) ++l.wrong;
  });
  return l;
}

TEST(RedisCluster, KeySlotsAgreeWithTheServers) {
  std::vector<std::string> keys = block_keys(64, 7);
  for (const char* k : {"foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", ""})
    keys.emplace_back(k);
  for (const std::string& k : keys)
    EXPECT_EQ(cluster().command(0, {"CLUSTER", "KEYSLOT", k}), std::to_string(remote::cluster_key_slot(k))) << k;
}

TEST(RedisCluster, StoreAndLoadAcrossMastersAndTheirShares) {
  RedisClusterStore s(cluster_options());
  const std::vector<std::string> keys = block_keys(600, 1);
  std::vector<uint8_t> stored;
  ASSERT_EQ(set_all(s, keys, 20656, stored), RemoteStatus::kOk) << s.last_error();
  EXPECT_EQ(std::count(stored.begin(), stored.end(), uint8_t{1}), 600);
  std::vector<std::string> probe = keys;
  probe.push_back("pagedkv:absent");
  std::vector<uint8_t> present;
  ASSERT_EQ(s.exists(probe, present), RemoteStatus::kOk);
  EXPECT_EQ(std::count(present.begin(), present.end(), uint8_t{1}), 600);
  EXPECT_EQ(present.back(), 0);
  const Loaded l = get_all(s, keys, 20656);
  ASSERT_EQ(l.status, RemoteStatus::kOk) << s.last_error();
  EXPECT_EQ(l.found, 600);
  EXPECT_EQ(l.wrong, 0);
  EXPECT_EQ(s.stats().moved, 0u);
  // The shares of the masters: an even spread is a third each.
  std::map<std::string, int> per_master;
  for (const std::string& k : keys) ++per_master[s.master_of(k)];
  ASSERT_EQ(per_master.size(), 3u);
  std::string shares;
  for (const auto& [node, n] : per_master) {
    shares += fmt::format(" {} {:.1f}%", node, 100.0 * n / 600);
    EXPECT_GT(n, 150) << node;
    EXPECT_LT(n, 250) << node;
  }
  fmt::print("keys per master:{}\n", shares);
  // Reads from the replicas (after the masters' writes reached them) find the same values.
  for (const std::string& m : s.masters()) {
    const int port = std::atoi(m.substr(m.rfind(':') + 1).c_str());
    EXPECT_EQ(cluster().command(cluster().index_of_port(port), {"WAIT", "1", "2000"}), "1") << m;
  }
  RedisClusterStore r(cluster_options(/*replicas=*/true));
  const Loaded from_replicas = get_all(r, keys, 20656);
  EXPECT_EQ(from_replicas.status, RemoteStatus::kOk) << r.last_error();
  EXPECT_EQ(from_replicas.found, 600);
  EXPECT_EQ(from_replicas.wrong, 0);
}

// Pieces of one command with one in flight, and sizes that leave a short last piece per node:
// every key is answered once, in its place, whatever the pipelines' shape.
TEST(RedisCluster, AnyPieceSizeAndCountAheadAnswersEveryKey) {
  int round = 0;
  for (const auto& [depth, ahead] : std::vector<std::pair<size_t, size_t>>{{1, 1}, {3, 5}, {7, 1}, {64, 3}}) {
    remote::RedisClusterStoreOptions o = cluster_options();
    o.get_pipeline_depth = o.set_pipeline_depth = depth;
    o.get_pieces_ahead = o.set_pieces_ahead = ahead;
    RedisClusterStore s(o);
    const std::vector<std::string> keys = block_keys(101, 50 + round++);
    std::vector<uint8_t> stored;
    ASSERT_EQ(set_all(s, keys, 3000, stored), RemoteStatus::kOk) << s.last_error();
    EXPECT_EQ(std::count(stored.begin(), stored.end(), uint8_t{1}), 101) << depth << " x " << ahead;
    const Loaded l = get_all(s, keys, 3000);
    ASSERT_EQ(l.status, RemoteStatus::kOk) << s.last_error();
    EXPECT_EQ(l.found, 101) << depth << " x " << ahead;
    EXPECT_EQ(l.wrong, 0) << depth << " x " << ahead;
  }
}

TEST(RedisCluster, PlainRedisUrlDetectsTheCluster) {
  TierConfig tiers;
  remote::use_redis_tier(tiers, {.url = cluster().seed_url(1)});
  std::unique_ptr<RemoteStore> s = tiers.remote_store();
  const std::vector<std::string> keys = block_keys(50, 2);
  std::vector<uint8_t> stored;
  ASSERT_EQ(set_all(*s, keys, 1000, stored), RemoteStatus::kOk) << s->last_error();
  EXPECT_TRUE(dynamic_cast<remote::RedisAutoStore&>(*s).is_cluster());
  RedisClusterStore direct(cluster_options());
  const Loaded l = get_all(direct, keys, 1000);
  EXPECT_EQ(l.found, 50);
  EXPECT_EQ(l.wrong, 0);
  // A single server behind the same kind of URL stays a single server.
  RedisTestServer single;
  remote::use_redis_tier(tiers, {.url = single.url()});
  std::unique_ptr<RemoteStore> one = tiers.remote_store();
  ASSERT_EQ(set_all(*one, keys, 1000, stored), RemoteStatus::kOk) << one->last_error();
  EXPECT_FALSE(dynamic_cast<remote::RedisAutoStore&>(*one).is_cluster());
}

TEST(RedisCluster, UnreachableAndGarbageAreClearErrors) {
  // Nobody listening: a clear kUnavailable naming the nodes tried.
  remote::RedisClusterStoreOptions o;
  o.seeds = remote::parse_redis_cluster_url(fmt::format("redis-cluster://127.0.0.1:{}", free_loopback_port()));
  RedisClusterStore nobody(o);
  std::vector<uint8_t> present;
  EXPECT_EQ(nobody.exists(block_keys(3, 3), present), RemoteStatus::kUnavailable);
  EXPECT_NE(nobody.last_error().find("no slot map"), std::string::npos) << nobody.last_error();
  // A single server named as a cluster: CLUSTER SLOTS is refused, and the error says so.
  RedisTestServer single;
  o.seeds = remote::parse_redis_cluster_url(fmt::format("redis-cluster://127.0.0.1:{}", single.port()));
  RedisClusterStore not_a_cluster(o);
  EXPECT_EQ(not_a_cluster.ping(), RemoteStatus::kUnavailable);
  EXPECT_NE(not_a_cluster.last_error().find("cluster support disabled"), std::string::npos)
      << not_a_cluster.last_error();
  // A node answering garbage (not RESP): a protocol error, for the cluster store and for the
  // detection behind redis://.
  GarbageServer garbage;
  o.seeds = remote::parse_redis_cluster_url(fmt::format("redis-cluster://127.0.0.1:{}", garbage.port()));
  RedisClusterStore confused(o);
  EXPECT_EQ(confused.exists(block_keys(3, 3), present), RemoteStatus::kUnavailable);
  EXPECT_NE(confused.last_error().find("Protocol error"), std::string::npos) << confused.last_error();
  TierConfig tiers;
  remote::use_redis_tier(tiers, {.url = fmt::format("redis://127.0.0.1:{}", garbage.port())});
  std::unique_ptr<RemoteStore> detecting = tiers.remote_store();
  EXPECT_EQ(detecting->exists(block_keys(3, 3), present), RemoteStatus::kUnavailable);
  EXPECT_NE(detecting->last_error().find("Protocol error"), std::string::npos) << detecting->last_error();
}

// Two migrations with the store working through them: one slot moved by hand (SETSLOT MIGRATING
// and IMPORTING, MIGRATE of half its keys: reads and new writes there get ASK), then
// `redis-cli --cluster reshard` of 300 slots in the background while the store writes and reads
// (MOVED). No value read is ever wrong, and nothing stored is lost.
TEST(RedisCluster, SlotMigrationUnderLoadFollowsRedirections) {
  RedisClusterStore s(cluster_options());
  std::vector<std::string> tagged;
  for (int i = 0; i < 40; ++i) tagged.push_back(fmt::format("{{migrating}}:{}", i));
  std::vector<uint8_t> stored;
  ASSERT_EQ(set_all(s, tagged, 5000, stored), RemoteStatus::kOk);
  const int slot = remote::cluster_key_slot("migrating");
  const std::string from = s.master_of(tagged[0]);
  const std::vector<RedisTestCluster::NodeInfo> nodes = cluster().cluster_nodes(0);
  const RedisTestCluster::NodeInfo* src = nullptr;
  const RedisTestCluster::NodeInfo* dst = nullptr;
  for (const auto& n : nodes)
    if (n.master) (fmt::format("127.0.0.1:{}", n.port) == from ? src : dst) = &n;
  ASSERT_TRUE(src && dst);
  const int si = cluster().index_of_port(src->port), di = cluster().index_of_port(dst->port);
  const std::string slot_s = std::to_string(slot);
  ASSERT_EQ(cluster().command(di, {"CLUSTER", "SETSLOT", slot_s, "IMPORTING", src->id}), "OK");
  ASSERT_EQ(cluster().command(si, {"CLUSTER", "SETSLOT", slot_s, "MIGRATING", dst->id}), "OK");
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(cluster().command(
                  si, {"MIGRATE", "127.0.0.1", std::to_string(dst->port), tagged[static_cast<size_t>(i)], "0", "5000"}),
              "OK");
  Loaded l = get_all(s, tagged, 5000);
  EXPECT_EQ(l.status, RemoteStatus::kOk);
  EXPECT_EQ(l.found, 40);
  EXPECT_EQ(l.wrong, 0);
  EXPECT_GE(s.stats().asked, 20u);
  std::vector<std::string> fresh = {"{migrating}:new1", "{migrating}:new2"};  // absent on the source: ASK
  ASSERT_EQ(set_all(s, fresh, 5000, stored), RemoteStatus::kOk);
  EXPECT_EQ(stored, (std::vector<uint8_t>{1, 1}));
  for (int i = 20; i < 40; ++i)
    ASSERT_EQ(cluster().command(
                  si, {"MIGRATE", "127.0.0.1", std::to_string(dst->port), tagged[static_cast<size_t>(i)], "0", "5000"}),
              "OK");
  for (int i = 0; i < cluster().size(); ++i) cluster().command(i, {"CLUSTER", "SETSLOT", slot_s, "NODE", dst->id});
  tagged.insert(tagged.end(), fresh.begin(), fresh.end());
  l = get_all(s, tagged, 5000);
  EXPECT_EQ(l.found, 42);
  EXPECT_EQ(l.wrong, 0);
  EXPECT_GE(s.stats().moved, 1u);
  EXPECT_EQ(s.master_of(tagged[0]), fmt::format("127.0.0.1:{}", dst->port));

  // A reshard in the background, the store busy meanwhile.
  const std::vector<std::string> keys = block_keys(400, 4);
  ASSERT_EQ(set_all(s, keys, 5000, stored), RemoteStatus::kOk);
  const std::string reshard = fmt::format(
      "timeout 60 redis-cli --cluster reshard 127.0.0.1:{} --cluster-from {} --cluster-to {} --cluster-slots 300 "
      "--cluster-yes > {}/reshard.log 2>&1",
      cluster().node(0).port(), dst->id, src->id, cluster().node(0).dir().string());
  std::atomic<int> reshard_rc{-1};
  std::thread mover([&] { reshard_rc = std::system(reshard.c_str()); });
  int rounds = 0, wrong = 0, missed = 0;
  uint64_t extra = 0;
  while (reshard_rc.load() < 0 && rounds < 2000) {
    ++rounds;
    const Loaded r = get_all(s, keys, 5000);
    wrong += r.wrong;
    missed += 400 - r.found;
    std::vector<std::string> more = block_keys(8, 1000 + extra++);
    set_all(s, more, 5000, stored);
  }
  mover.join();
  EXPECT_EQ(reshard_rc.load(), 0) << "see reshard.log";
  EXPECT_EQ(wrong, 0);
  const Loaded after = get_all(s, keys, 5000);
  EXPECT_EQ(after.found, 400);
  EXPECT_EQ(after.wrong, 0);
  fmt::print("reshard under load: {} rounds of 400 GETs + 8 SETs, {} misses, {} MOVED, {} ASK, {} maps read\n", rounds,
             missed, s.stats().moved, s.stats().asked, s.stats().map_reads);
  ASSERT_TRUE(cluster().wait_healthy(std::chrono::seconds(10)));
}

// A master that hangs (SIGSTOP, shorter than the cluster-node-timeout, so no failover): a call
// waits one socket timeout for it while the other masters' replies are taken, returns their keys,
// and once the node is back and its breaker lets a call through, its keys hit again.
TEST(RedisCluster, HungMasterCostsOneTimeoutAndOnlyItsKeys) {
  remote::RedisClusterStoreOptions o = cluster_options();
  o.io_timeout = std::chrono::milliseconds(150);
  RedisClusterStore s(o);
  const std::vector<std::string> keys = block_keys(150, 8);
  std::vector<uint8_t> stored;
  ASSERT_EQ(set_all(s, keys, 4000, stored), RemoteStatus::kOk);
  const std::string hung = s.master_of(keys[0]);
  const int hi = cluster().index_of_port(std::atoi(hung.substr(hung.rfind(':') + 1).c_str()));
  int elsewhere = 0;
  for (const std::string& k : keys) elsewhere += s.master_of(k) != hung;
  cluster().node(hi).pause();
  const auto t0 = Clock::now();
  const Loaded l = get_all(s, keys, 4000);
  const auto waited = Clock::now() - t0;
  cluster().node(hi).resume();
  EXPECT_EQ(l.status, RemoteStatus::kOk) << s.last_error();
  EXPECT_EQ(l.found, elsewhere);
  EXPECT_EQ(l.wrong, 0);
  EXPECT_LT(waited, std::chrono::milliseconds(1500));  // a bound, not a measurement
  EXPECT_NE(s.last_error().find("timed out"), std::string::npos) << s.last_error();
  EXPECT_TRUE(eventually([&] { return get_all(s, keys, 4000).found == 150; }, std::chrono::seconds(5)));
  ASSERT_TRUE(cluster().wait_healthy(std::chrono::seconds(10)));
}

// kill -9 of a master mid-run: every call still returns (no exception, bounded time), the other
// masters' keys keep hitting, its keys miss until its replica is promoted, then hit again (the
// replica had them); stores into its slots resume. The killed node restarts as a replica.
TEST(RedisCluster, MasterKilledReplicaPromotedHitsResume) {
  RedisClusterStore s(cluster_options());
  const std::vector<std::string> keys = block_keys(300, 5);
  std::vector<uint8_t> stored;
  ASSERT_EQ(set_all(s, keys, 4000, stored), RemoteStatus::kOk);
  for (const std::string& m : s.masters()) {
    const int port = std::atoi(m.substr(m.rfind(':') + 1).c_str());
    ASSERT_EQ(cluster().command(cluster().index_of_port(port), {"WAIT", "1", "2000"}), "1") << m;
  }
  const std::string victim = s.master_of(keys[0]);
  const int vi = cluster().index_of_port(std::atoi(victim.substr(victim.rfind(':') + 1).c_str()));
  std::vector<uint8_t> on_victim;
  for (const std::string& k : keys) on_victim.push_back(s.master_of(k) == victim);
  const int victims = static_cast<int>(std::count(on_victim.begin(), on_victim.end(), uint8_t{1}));
  cluster().node(vi).kill();
  const auto killed = Clock::now();
  bool others_always_hit = true;
  double promoted_after = -1;
  int rounds = 0;
  while (Clock::now() - killed < std::chrono::seconds(20)) {
    ++rounds;
    const auto t0 = Clock::now();
    const Loaded l = get_all(s, keys, 4000);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
    EXPECT_EQ(l.status, RemoteStatus::kOk) << s.last_error();
    EXPECT_EQ(l.wrong, 0);
    for (size_t i = 0; i < keys.size(); ++i)
      if (!on_victim[i] && !l.present[i]) others_always_hit = false;
    if (l.found == 300 && s.master_of(keys[0]) != victim) {
      promoted_after = std::chrono::duration<double>(Clock::now() - killed).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(others_always_hit);
  ASSERT_GT(promoted_after, 0) << "the replica was not promoted, or the map not reread";
  fmt::print(
      "master {} ({} of 300 keys) killed: its replica {} serves them again after {:.2f} s ({} rounds, {} node "
      "failures, {} keys skipped)\n",
      victim, victims, s.master_of(keys[0]), promoted_after, rounds, s.stats().node_failures, s.stats().skipped_keys);
  // Stores into the failed-over slots go through.
  const std::vector<std::string> more = block_keys(60, 6);
  ASSERT_EQ(set_all(s, more, 4000, stored), RemoteStatus::kOk);
  EXPECT_EQ(std::count(stored.begin(), stored.end(), uint8_t{1}), 60);
  // Heal: the killed node comes back (its nodes.conf) as a replica of the promoted one.
  ASSERT_TRUE(cluster().node(vi).start());
  ASSERT_TRUE(cluster().wait_healthy(std::chrono::seconds(15)));
}

// ---- the remote tier on the cluster -----------------------------------------------------------

TierConfig cluster_tier() {
  TierConfig c;
  remote::use_redis_tier(c, {.url = cluster().url(), .timeout_ms = 1000});  // room for a loaded or sanitized run
  c.remote_probe_wait = std::chrono::milliseconds(2000);
  c.log_degraded = false;
  return c;
}

// Two caches share prefixes through the cluster; every block a cache takes from it holds exactly
// the bytes of the run without tiers (admit_and_verify). A master with a replica is killed
// mid-run: both keep serving, nothing wrong is loaded, and sharing resumes after the promotion.
TEST(RemoteTierOnCluster, SharedPrefixesWithAMasterKilledMidRun) {
  Device da(64), db(64);
  TieredKVCache ta(cluster_tier(), da.manager, da.arena, 42);
  TieredKVCache tb(cluster_tier(), db.manager, db.arena, 42);
  for (int p = 0; p < 6; ++p) {
    Request a = make_request(static_cast<uint64_t>(1 + p), 33, 1000 * p);
    EXPECT_EQ(admit_and_verify(da, ta, a, /*write_through=*/true).total(), 0);
  }
  ASSERT_TRUE(eventually([&] { return ta.remote()->stats().stored_blocks == 48; }));
  for (int p = 0; p < 6; ++p) {
    Request b = make_request(static_cast<uint64_t>(100 + p), 33, 1000 * p);
    EXPECT_EQ(admit_and_verify(db, tb, b, /*write_through=*/true).remote, 32) << p;
  }
  // Kill a master (one that has a replica) and keep both caches busy.
  const auto nodes = cluster().cluster_nodes(0);
  int victim = -1;
  for (const auto& n : nodes)
    if (n.master)
      for (const auto& r : nodes)
        if (r.master_id == n.id) victim = cluster().index_of_port(n.port);
  ASSERT_GE(victim, 0);
  // The map from before the kill says which blocks lived on the victim.
  RedisClusterStore before(cluster_options());
  ASSERT_EQ(before.ping(), RemoteStatus::kOk);
  const std::string victim_address = fmt::format("127.0.0.1:{}", cluster().node(victim).port());
  cluster().node(victim).kill();
  const auto killed = Clock::now();
  // Sharing has resumed when B takes a whole prefix from the tier, some of it from the victim's
  // former slots (a prefix whose blocks all live elsewhere hits all along).
  int resumed_at = -1, partial = 0, elsewhere = 0;
  for (int i = 0; i < 400 && resumed_at < 0; ++i) {
    const TokenId first = 100000 + 1000 * i;
    Request a = make_request(static_cast<uint64_t>(1000 + 2 * i), 33, first);
    EXPECT_EQ(admit_and_verify(da, ta, a, /*write_through=*/true).total(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // A's stores go out
    Request b = make_request(static_cast<uint64_t>(1001 + 2 * i), 33, first);
    const int remote = admit_and_verify(db, tb, b, /*write_through=*/true).remote;
    bool on_victim = false;
    for (size_t k = 0; k < 8; ++k)
      on_victim |= before.master_of(tb.remote()->key_of(b.block_hashes[k])) == victim_address;
    if (remote < 32) ++partial;
    else if (!on_victim) ++elsewhere;
    else resumed_at = i;
  }
  ASSERT_GE(resumed_at, 0) << "sharing did not resume after the promotion";
  EXPECT_EQ(ta.remote()->stats().corrupt_blocks + tb.remote()->stats().corrupt_blocks, 0u);
  fmt::print(
      "master {} killed: sharing through its slots resumed after {:.2f} s ({} request pairs: {} partly "
      "computed, {} whole hits from the other masters); B's remote tier: {} blocks loaded, {} link failures\n",
      victim_address, std::chrono::duration<double>(Clock::now() - killed).count(), resumed_at + 1, partial, elsewhere,
      tb.remote()->stats().loaded_blocks, tb.remote()->stats().io_errors);
  ASSERT_TRUE(cluster().node(victim).start());
  ASSERT_TRUE(cluster().wait_healthy(std::chrono::seconds(15)));
}

}  // namespace
}  // namespace pagedkv
