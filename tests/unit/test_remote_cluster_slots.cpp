// Redis Cluster's key slots (CRC16 XMODEM, hash tags), the slot map read from CLUSTER SHARDS and
// CLUSTER SLOTS replies (fed through hiredis' own protocol reader, as the store receives them) and the
// redis-cluster:// URL. No server: the cluster itself is test_remote_cluster's.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>

#include "pagedkv/core/error.h"
#include "pagedkv/remote/cluster_slots.h"
#include "pagedkv/remote/cluster_topology.h"
#include "pagedkv/remote/redis_store.h"
#include "pagedkv/remote/redis_url.h"
#include "pagedkv/tiers/tiered_kv_cache.h"

namespace pagedkv::remote {
namespace {

TEST(ClusterSlots, Crc16XmodemKnownVectors) {
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(crc16_xmodem(""), 0);
  EXPECT_EQ(crc16_xmodem("A"), 0x58E5);
}

// The CRC bit by bit, as its definition reads (polynomial 0x1021, MSB first, initial value 0).
uint16_t crc16_bit_by_bit(std::string_view data) {
  uint16_t crc = 0;
  for (char ch : data) {
    crc = static_cast<uint16_t>(crc ^ (static_cast<uint8_t>(ch) << 8));
    for (int bit = 0; bit < 8; ++bit) crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

TEST(ClusterSlots, Crc16EightBytesAtATimeEqualsBitByBit) {
  std::string data;
  uint32_t x = 12345;
  for (size_t len = 0; len < 100; ++len) {  // every tail length after the 8-byte steps, all byte values
    EXPECT_EQ(crc16_xmodem(data), crc16_bit_by_bit(data)) << len;
    x = x * 1103515245u + 12345u;
    data.push_back(static_cast<char>(x >> 24));
  }
}

TEST(ClusterSlots, KeySlotsAsRedisComputesThem) {
  EXPECT_EQ(cluster_key_slot("foo"), 12182);
  EXPECT_EQ(cluster_key_slot("somekey"), 11058);
  EXPECT_EQ(cluster_key_slot("foo{hash_tag}"), 2515);
  EXPECT_EQ(cluster_key_slot("hash_tag"), 2515);
  for (int i = 0; i < 1000; ++i) {
    const int s = cluster_key_slot("key" + std::to_string(i));
    EXPECT_GE(s, 0);
    EXPECT_LT(s, kClusterSlots);
  }
}

TEST(ClusterSlots, HashTagRules) {
  EXPECT_EQ(cluster_hash_tag("{user1000}.following"), "user1000");
  EXPECT_EQ(cluster_key_slot("{user1000}.following"), cluster_key_slot("{user1000}.followers"));
  EXPECT_EQ(cluster_hash_tag("foo{}{bar}"), "foo{}{bar}");  // an empty first tag: the whole key
  EXPECT_EQ(cluster_hash_tag("foo{{bar}}zap"), "{bar");  // from the first '{' to the first '}'
  EXPECT_EQ(cluster_hash_tag("foo{bar}{zap}"), "bar");  // only the first tag
  EXPECT_EQ(cluster_hash_tag("foo{bar"), "foo{bar");  // unclosed: the whole key
  EXPECT_EQ(cluster_hash_tag("foo}bar{"), "foo}bar{");
  EXPECT_EQ(cluster_hash_tag("plain"), "plain");
}

// A reply as hiredis parses it from the RESP bytes `resp`.
struct ParsedReply {
  explicit ParsedReply(const std::string& resp) {
    std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(redisReaderCreate(), redisReaderFree);
    redisReaderFeed(reader.get(), resp.data(), resp.size());
    void* out = nullptr;
    if (redisReaderGetReply(reader.get(), &out) != REDIS_OK || out == nullptr) throw std::runtime_error("bad RESP");
    reply = static_cast<redisReply*>(out);
  }
  ~ParsedReply() { freeReplyObject(reply); }
  redisReply* reply = nullptr;
};

std::string bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }
std::string node(const std::string& host, int port, const std::string& id) {
  return "*3\r\n" + bulk(host) + ":" + std::to_string(port) + "\r\n" + bulk(id);
}

TEST(ClusterTopology, ThreeMastersWithReplicasFromClusterSlots) {
  const std::string resp =
      "*3\r\n"
      "*4\r\n:0\r\n:5460\r\n" +
      node("127.0.0.1", 7000, "a") + node("127.0.0.1", 7003, "d") + "*4\r\n:5461\r\n:10922\r\n" +
      node("127.0.0.1", 7001, "b") + node("127.0.0.1", 7004, "e") + "*4\r\n:10923\r\n:16383\r\n" +
      node("127.0.0.1", 7002, "c") + node("", 7005, "f");
  ParsedReply r(resp);
  std::string error;
  auto t = ClusterTopology::from_cluster_slots(*r.reply, "10.0.0.9", error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->covered_slots(), kClusterSlots);
  EXPECT_EQ(t->masters().size(), 3u);
  EXPECT_EQ(t->nodes().size(), 6u);
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(0))].name(), "127.0.0.1:7000");
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(5461))].name(), "127.0.0.1:7001");
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(cluster_key_slot("foo")))].name(), "127.0.0.1:7002");
  ASSERT_EQ(t->replicas_of(16383).size(), 1u);
  // An empty endpoint is the answering node's host.
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->replicas_of(16383)[0])].name(), "10.0.0.9:7005");
  // MOVED: one slot changes hands; its replicas are unknown until the next map.
  t->move_slot(100, ClusterNodeAddress{"127.0.0.1", 7001});
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(100))].name(), "127.0.0.1:7001");
  EXPECT_TRUE(t->replicas_of(100).empty());
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(101))].name(), "127.0.0.1:7000");
  t->move_slot(101, ClusterNodeAddress{"::1", 7010});
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(101))].name(), "[::1]:7010");
}

// A CLUSTER SHARDS node as Redis 7 sends it over RESP2 (a map as a flat array).
std::string shard_node(const std::string& endpoint, int port, const std::string& role, const std::string& health) {
  return "*14\r\n" + bulk("id") + bulk("x") + bulk("port") + ":" + std::to_string(port) + "\r\n" + bulk("ip") +
         bulk("127.0.0.1") + bulk("endpoint") + bulk(endpoint) + bulk("role") + bulk(role) +
         bulk("replication-offset") + ":0\r\n" + bulk("health") + bulk(health);
}
std::string shard(const std::string& slots, int n_slots, const std::string& nodes, int n_nodes) {
  return "*4\r\n" + bulk("slots") + "*" + std::to_string(n_slots) + "\r\n" + slots + bulk("nodes") + "*" +
         std::to_string(n_nodes) + "\r\n" + nodes;
}

TEST(ClusterTopology, FromClusterShards) {
  const std::string resp =
      "*3\r\n" +
      shard(":0\r\n:5460\r\n", 2,
            shard_node("10.0.0.1", 7000, "master", "online") + shard_node("10.0.0.4", 7003, "replica", "online"), 2) +
      // Two ranges; the master listed after its replica; a replica still loading is left out.
      shard(":5461\r\n:10000\r\n:10001\r\n:10922\r\n", 4,
            shard_node("10.0.0.5", 7004, "replica", "loading") + shard_node("", 7001, "master", "online"), 2) +
      shard(":10923\r\n:16383\r\n", 2, shard_node("10.0.0.3", 7002, "master", "online"), 1);
  ParsedReply r(resp);
  std::string error;
  auto t = ClusterTopology::from_cluster_shards(*r.reply, "10.0.0.9", error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->covered_slots(), kClusterSlots);
  EXPECT_EQ(t->masters().size(), 3u);
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(0))].name(), "10.0.0.1:7000");
  ASSERT_EQ(t->replicas_of(0).size(), 1u);
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->replicas_of(0)[0])].name(), "10.0.0.4:7003");
  // An empty endpoint falls back to the node's ip.
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(10001))].name(), "127.0.0.1:7001");
  EXPECT_TRUE(t->replicas_of(10001).empty());
  EXPECT_EQ(t->nodes()[static_cast<size_t>(t->master_of(16383))].name(), "10.0.0.3:7002");
  for (const std::string& bad : {std::string("*1\r\n*2\r\n$5\r\nslots\r\n*0\r\n"),
                                 "*1\r\n" + shard(":0\r\n", 1, shard_node("h", 1, "master", "online"), 1),
                                 "*1\r\n" + shard(":9\r\n:3\r\n", 2, shard_node("h", 1, "master", "online"), 1)}) {
    ParsedReply b(bad);
    EXPECT_FALSE(ClusterTopology::from_cluster_shards(*b.reply, "h", error)) << bad;
    EXPECT_NE(error.find("CLUSTER SHARDS: shard 0"), std::string::npos) << error;
  }
}

TEST(ClusterTopology, PartialMapsAndUnknownEndpoints) {
  // Slots 0-99 only, and a range whose master's endpoint is unknown ("?"): unserved.
  ParsedReply r("*2\r\n*3\r\n:0\r\n:99\r\n" + node("h", 1, "a") + "*3\r\n:100\r\n:199\r\n" + node("?", 2, "b"));
  std::string error;
  auto t = ClusterTopology::from_cluster_slots(*r.reply, "h", error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->covered_slots(), 100);
  EXPECT_EQ(t->master_of(150), ClusterTopology::kNoNode);
}

TEST(ClusterTopology, GarbageIsAClearError) {
  const std::pair<std::string, std::string> cases[] = {
      {"-ERR This instance has cluster support disabled\r\n", "cluster support disabled"},
      {"+OK\r\n", "not an array"},
      {"*0\r\n", "no slot is served"},
      {"*1\r\n:5\r\n", "entry 0"},
      {"*1\r\n*3\r\n:10\r\n:5\r\n" + node("h", 1, "a"), "bad slot range"},
      {"*1\r\n*3\r\n:0\r\n:16384\r\n" + node("h", 1, "a"), "bad slot range"},
      {"*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:0\r\n", "bad master endpoint"},
      {"*1\r\n*4\r\n:0\r\n:5\r\n" + node("h", 1, "a") + ":7\r\n", "bad replica endpoint"},
  };
  for (const auto& [resp, why] : cases) {
    ParsedReply r(resp);
    std::string error;
    EXPECT_FALSE(ClusterTopology::from_cluster_slots(*r.reply, "h", error)) << resp;
    EXPECT_NE(error.find(why), std::string::npos) << error;
  }
}

TEST(RedisClusterUrl, NodesWithSharedCredentials) {
  auto nodes = parse_redis_cluster_url("redis-cluster://alice:s%40cret@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002");
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].host, "10.0.0.1");
  EXPECT_EQ(nodes[1].port, 7001);
  EXPECT_EQ(nodes[2].host, "::1");
  for (const RedisUrl& u : nodes) {
    EXPECT_EQ(u.user, "alice");
    EXPECT_EQ(u.password, "s@cret");
    EXPECT_EQ(u.db, 0);
  }
  EXPECT_EQ(redacted_cluster_url(nodes), "redis-cluster://alice:***@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002");
  EXPECT_EQ(parse_redis_cluster_url("redis-cluster://h").front().port, 6379);
  EXPECT_EQ(parse_redis_cluster_url("redis-cluster://h:1/0").size(), 1u);
  for (const char* bad : {"redis-cluster://", "redis-cluster://h:1,", "redis-cluster://,h:1", "redis-cluster://h:1,h:0",
                          "redis-cluster://h:1/2", "redis-cluster://h:1,bad host:2", "redis://h:1"}) {
    try {
      parse_redis_cluster_url(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--remote-cache"), std::string::npos) << e.what();
    }
  }
  try {
    parse_redis_cluster_url("redis-cluster://alice:topsecret@h:1,h:x");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("topsecret"), std::string::npos) << e.what();
  }
}

TEST(RedisClusterUrl, TierSettingsRefuseAHashTagInThePrefix) {
  TierConfig tiers;
  EXPECT_THROW(use_redis_tier(tiers, {.url = "redis-cluster://h:1", .key_prefix = "kv{x}"}), ConfigError);
  use_redis_tier(tiers, {.url = "redis-cluster://h:1,h:2"});
  EXPECT_EQ(tiers.remote_description, "redis-cluster://h:1,h:2");
  EXPECT_TRUE(tiers.remote_store);
}

}  // namespace
}  // namespace pagedkv::remote
