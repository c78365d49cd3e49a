// --remote-cache URLs: every accepted form, and every malformed one a ConfigError that names the
// URL (without its password). Run under ASan+UBSan with the other parsers (scripts/test.sh).
#include <gtest/gtest.h>

#include "pagedkv/core/error.h"
#include "pagedkv/remote/redis_url.h"

namespace pagedkv::remote {
namespace {

TEST(RedisUrl, AcceptedForms) {
  RedisUrl u = parse_redis_url("redis://127.0.0.1:6380/2");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  EXPECT_TRUE(u.user.empty() && u.password.empty());
  u = parse_redis_url("redis://localhost");
  EXPECT_EQ(u.host, "localhost");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.db, 0);
  u = parse_redis_url("redis://alice:s%40cret%3A1@cache.local:7000/");
  EXPECT_EQ(u.user, "alice");
  EXPECT_EQ(u.password, "s@cret:1");
  EXPECT_EQ(u.port, 7000);
  u = parse_redis_url("redis://:pw@[::1]:6379/15");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "pw");
  EXPECT_EQ(u.db, 15);
  EXPECT_EQ(u.redacted(), "redis://:***@[::1]:6379/15");
  EXPECT_EQ(parse_redis_url("redis://h:1").redacted(), "redis://h:1/0");
}

TEST(RedisUrl, MalformedUrlsAreConfigErrorsNamingThemWithoutThePassword) {
  for (const char* bad : {"",
                          "redis:/h:1",
                          "http://h:1",
                          "rediss://h:1",
                          "unix:///tmp/r.sock",
                          "redis://",
                          "redis://:1",
                          "redis://h:",
                          "redis://h:0",
                          "redis://h:65536",
                          "redis://h:12x",
                          "redis://h:1/x",
                          "redis://h:1/-1",
                          "redis://user@h:1",
                          "redis://u:@h:1",
                          "redis://u:%zz@h:1",
                          "redis://u:%4@h:1",
                          "redis://[::1:1",
                          "redis://[::1]x",
                          "redis://h:1?db=2",
                          "redis://h o:1",
                          "redis://h:99999999999999999999"}) {
    try {
      parse_redis_url(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--remote-cache"), std::string::npos) << e.what();
    }
  }
  try {
    parse_redis_url("redis://alice:topsecret@h:1/x");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("topsecret"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("redis://***@h:1/x"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagedkv::remote
