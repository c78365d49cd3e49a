// RedisStore and the remote tier against a real redis-server the test starts itself (loopback,
// free port, temporary directory, stopped at the end): pipelined round trips, AUTH with an ACL
// user and a database number, and the faults: down at start, killed and restarted, paused
// (timeouts), full under maxmemory noeviction. Then two caches sharing one Redis: a prefix one
// computed is loaded byte for byte by the other; Redis killed mid-run, serving goes on; back,
// sharing resumes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pagedkv/remote/redis_store.h"
#include "pagedkv/tiers/remote_value_format.h"
#include "redis_test_server.h"
#include "tiers_test_support.h"

namespace pagedkv {
namespace {

using namespace pagedkv::testing;
using remote::RedisStore;
using Clock = std::chrono::steady_clock;

std::vector<std::byte> bytes_of(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + static_cast<size_t>(seed)) & 0xff);
  return v;
}

// Sets keys k0..k{n-1} to bytes_of(size, i); returns the status.
RemoteStatus set_n(RedisStore& s, int n, size_t size, const std::string& prefix = "k") {
  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
  std::vector<std::span<const std::byte>> spans;
  for (int i = 0; i < n; ++i) {
    keys.push_back(prefix + std::to_string(i));
    values.push_back(bytes_of(size, i));
  }
  for (const auto& v : values) spans.emplace_back(v);
  std::vector<uint8_t> stored;
  return s.set(keys, spans, stored);
}

TEST(RedisStore, PipelinedSetExistsGetRoundTrip) {
  RedisTestServer redis;
  RedisStore s(redis.options());
  ASSERT_EQ(set_n(s, 20, 70000), RemoteStatus::kOk);
  std::vector<std::string> keys;
  for (int i = 0; i < 22; ++i) keys.push_back(fmt::format("k{}", i));  // k20, k21 absent
  std::vector<uint8_t> present;
  ASSERT_EQ(s.exists(keys, present), RemoteStatus::kOk);
  for (int i = 0; i < 22; ++i) EXPECT_EQ(present[static_cast<size_t>(i)], i < 20 ? 1 : 0) << i;
  std::vector<int> seen;
  ASSERT_EQ(s.get(keys,
                  [&](size_t i, std::span<const std::byte> v) {
                    seen.push_back(static_cast<int>(i));
                    EXPECT_TRUE(std::ranges::equal(v, bytes_of(70000, static_cast<int>(i)))) << i;
                  }),
            RemoteStatus::kOk);
  EXPECT_EQ(seen.size(), 20u);
  EXPECT_EQ(s.ping(), RemoteStatus::kOk);
}

TEST(RedisStore, AuthWithAnAclUserAndADatabase) {
  // One config line per option; redis-server joins an option's separate arguments with spaces.
  RedisTestServer redis({"--user", "alice", "on", ">wonderland", "~*", "&*", "+@all", "--user", "default", "off"});
  remote::RedisStoreOptions o = redis.options();
  o.url = remote::parse_redis_url(redis.url("alice:wonderland@", 3));
  RedisStore s(o);
  ASSERT_EQ(s.ping(), RemoteStatus::kOk) << s.last_error();
  ASSERT_EQ(set_n(s, 1, 10), RemoteStatus::kOk);
  o.url.db = 4;  // another database does not see db 3's keys
  RedisStore other(o);
  std::vector<uint8_t> present;
  ASSERT_EQ(other.exists(std::vector<std::string>{"k0"}, present), RemoteStatus::kOk);
  EXPECT_EQ(present[0], 0);
  o.url.password = "wrong";
  RedisStore refused(o);
  EXPECT_EQ(refused.ping(), RemoteStatus::kUnavailable);
  EXPECT_NE(refused.last_error().find("AUTH"), std::string::npos) << refused.last_error();
}

TEST(RedisStore, DownAtStartKilledRestartedAndPaused) {
  auto redis = std::make_unique<RedisTestServer>();
  remote::RedisStoreOptions o = redis->options(std::chrono::milliseconds(100));
  RedisStore s(o);
  ASSERT_EQ(set_n(s, 4, 1000), RemoteStatus::kOk);
  redis->kill();
  EXPECT_EQ(set_n(s, 4, 1000), RemoteStatus::kUnavailable);
  EXPECT_FALSE(s.connected());
  EXPECT_EQ(s.ping(), RemoteStatus::kUnavailable);  // refused at connect
  ASSERT_TRUE(redis->start());  // same port, empty (no persistence)
  EXPECT_EQ(s.ping(), RemoteStatus::kOk);  // reconnected on the next call
  // Paused (a hung server): every call ends at the socket timeout instead of waiting.
  redis->pause();
  const auto t0 = Clock::now();
  EXPECT_EQ(s.ping(), RemoteStatus::kUnavailable);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));  // a bound, not a measurement
  redis->resume();
  EXPECT_EQ(s.ping(), RemoteStatus::kOk);
}

// A server restart leaves a reused connection dead (the old socket only reports it on the next
// write or read). Each call replaces such a connection and resends once, so the first call after
// a restart succeeds instead of costing a lookup; and a large pipelined write into the dead
// socket (EPIPE) neither kills the process with SIGPIPE nor loses the call.
TEST(RedisStore, ConnectionDroppedByARestartIsReplacedWithinTheCall) {
  auto redis = std::make_unique<RedisTestServer>();
  RedisStore s(redis->options());
  ASSERT_EQ(set_n(s, 2, 1000), RemoteStatus::kOk);
  const std::vector<std::string> keys = {"k0", "k1"};
  std::vector<uint8_t> present;
  for (int round = 0; round < 3; ++round) {
    redis->kill();
    ASSERT_TRUE(redis->start());  // same port, empty
    ASSERT_TRUE(s.connected());  // still holding the pre-restart socket
    switch (round) {
      case 0:
        ASSERT_EQ(s.exists(keys, present), RemoteStatus::kOk) << s.last_error();
        EXPECT_EQ(present, (std::vector<uint8_t>{0, 0}));
        break;
      case 1:  // 2.8 MB through 64 KiB write chunks: the writes after the first meet EPIPE
        ASSERT_EQ(set_n(s, 40, 70000), RemoteStatus::kOk) << s.last_error();
        break;
      case 2: {
        int found = 0;
        ASSERT_EQ(s.get(keys, [&](size_t, std::span<const std::byte>) { ++found; }), RemoteStatus::kOk)
            << s.last_error();
        EXPECT_EQ(found, 0);
        break;
      }
    }
    ASSERT_EQ(set_n(s, 2, 1000), RemoteStatus::kOk);
  }
  // A server that is down stays a fast kUnavailable: one failed resend, not a loop.
  redis->kill();
  EXPECT_EQ(s.exists(keys, present), RemoteStatus::kUnavailable);
  EXPECT_FALSE(s.connected());
}

TEST(RedisStore, FullUnderMaxmemoryNoevictionRefusesWritesNotReads) {
  RedisTestServer redis({"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"});
  RedisStore s(redis.options());
  ASSERT_EQ(set_n(s, 2, 100000, "keep"), RemoteStatus::kOk);
  RemoteStatus st = RemoteStatus::kOk;
  for (int round = 0; round < 50 && st == RemoteStatus::kOk; ++round)
    st = set_n(s, 8, 200000, "fill" + std::to_string(round) + "_");
  EXPECT_EQ(st, RemoteStatus::kFull);
  EXPECT_NE(s.last_error().find("OOM"), std::string::npos) << s.last_error();
  int found = 0;
  ASSERT_EQ(s.get(std::vector<std::string>{"keep0", "keep1"}, [&](size_t, std::span<const std::byte>) { ++found; }),
            RemoteStatus::kOk);
  EXPECT_EQ(found, 2);
}

// ---- the remote tier on Redis -------------------------------------------------------------------

TierConfig redis_tier(const RedisTestServer& redis) {
  TierConfig c;
  c.remote_store = remote::redis_store_factory(redis.options(std::chrono::milliseconds(200)));
  c.remote_description = redis.url();
  c.remote_probe_wait = std::chrono::milliseconds(2000);
  c.log_degraded = false;
  return c;
}

TEST(RemoteTierOnRedis, SharedPrefixKilledMidRunThenBack) {
  RedisTestServer redis;
  Device da(9), db(9);
  TieredKVCache ta(redis_tier(redis), da.manager, da.arena, 42);
  TieredKVCache tb(redis_tier(redis), db.manager, db.arena, 42);
  Request a = make_request(1, 17, 0);
  EXPECT_EQ(admit_and_verify(da, ta, a, /*write_through=*/true).total(), 0);
  ASSERT_TRUE(eventually([&] { return ta.remote()->stats().stored_blocks == 4; }));
  Request b = make_request(2, 17, 0);
  const TierHitTokens hit = admit_and_verify(db, tb, b, /*write_through=*/true);
  EXPECT_EQ(hit.remote, 16);
  EXPECT_EQ(tb.remote()->stats().loaded_blocks, 4u);
  // Killed: both keep serving (computing), the tier degraded, nothing thrown.
  redis.kill();
  Request a2 = make_request(3, 17, 1000);
  EXPECT_EQ(admit_and_verify(da, ta, a2, /*write_through=*/true).total(), 0);
  EXPECT_TRUE(eventually([&] { return ta.remote()->degraded(); }));
  Request b2 = make_request(4, 17, 1000);
  EXPECT_EQ(admit_and_verify(db, tb, b2, /*write_through=*/true).total(), 0);
  // Back (empty): sharing resumes once the back-off lets the next call through.
  ASSERT_TRUE(redis.start());
  TokenId first = -1;
  for (int i = 0; i < 200 && first < 0; ++i) {
    Request r = make_request(10 + i, 17, 5000 + 100 * i);
    admit_and_verify(da, ta, r, /*write_through=*/true);
    if (eventually([&] { return ta.remote()->stats().stored_blocks >= 8; }, std::chrono::milliseconds(20)))
      first = 5000 + 100 * i;
  }
  ASSERT_GE(first, 0);
  // The store that showed the link working may have been an earlier request's, landing late (a
  // slow machine, TSan): settle, then store one fresh prefix and wait for exactly its 4 blocks.
  uint64_t settled = ta.remote()->stats().stored_blocks;
  for (int i = 0; i < 50; ++i) {  // bounded: 50 quiet periods of 100 ms at most
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t now = ta.remote()->stats().stored_blocks;
    if (now == settled) break;
    settled = now;
  }
  // One fresh prefix stored by A, then read whole by B: B's connections from before the restart
  // are dead, and its first lookup must replace them rather than miss.
  Request a3 = make_request(300, 17, 50000);
  admit_and_verify(da, ta, a3, /*write_through=*/true);
  ASSERT_TRUE(eventually([&] { return ta.remote()->stats().stored_blocks >= settled + 4; }));
  ASSERT_TRUE(eventually([&] { return tb.remote()->available(); }));
  Request b3 = make_request(301, 17, 50000);
  EXPECT_EQ(admit_and_verify(db, tb, b3, /*write_through=*/true).remote, 16);
  EXPECT_FALSE(tb.remote()->degraded());
}

}  // namespace
}  // namespace pagedkv
