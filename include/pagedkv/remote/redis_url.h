// The address of a Redis server as --remote-cache takes it: redis://[user:password@]host:port[/db]
// (also redis://[:password@]host[:port][/db]; port 6379 and db 0 by default; rediss:// (TLS) and
// unix sockets are not supported). A malformed URL is a ConfigError naming it.
#pragma once

#include <string>
#include <string_view>

namespace pagedkv::remote {

struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // empty: the default user (AUTH password) or no AUTH
  std::string password;  // empty: no AUTH

  // The URL without the password, for messages and logs.
  std::string redacted() const;
};

RedisUrl parse_redis_url(std::string_view url);  // throws ConfigError

}  // namespace pagedkv::remote
