// The address of a Redis server as --remote-cache takes it: redis://[user:password@]host:port[/db]
// (also redis://[:password@]host[:port][/db]; port 6379 and db 0 by default; rediss:// (TLS) and
// unix sockets are not supported), or of a Redis Cluster's nodes to start from:
// redis-cluster://[user:password@]host1:port1,host2:port2,... (database 0 only). A malformed
// URL is a ConfigError naming it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagedkv::remote {

struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;  // empty: the default user (AUTH password) or no AUTH
  std::string password;  // empty: no AUTH

  // The URL without the password, for messages and logs.
  std::string redacted() const;
};

RedisUrl parse_redis_url(std::string_view url);  // throws ConfigError

inline constexpr std::string_view kRedisClusterScheme = "redis-cluster://";
// The nodes of a redis-cluster:// URL, each with the URL's credentials.
std::vector<RedisUrl> parse_redis_cluster_url(std::string_view url);  // throws ConfigError
// redis-cluster://host1:port1,... without the password, for messages and logs.
std::string redacted_cluster_url(const std::vector<RedisUrl>& nodes);

}  // namespace pagedkv::remote
