#include "pagedkv/remote/redis_url.h"

#include <fmt/format.h>

#include <charconv>

#include "pagedkv/core/error.h"

namespace pagedkv::remote {
namespace {

[[noreturn]] void bad(std::string_view url, std::string_view why) {
  // The password never reaches a message: everything between "//" and "@" is elided.
  std::string shown(url);
  if (auto at = shown.rfind('@'); at != std::string::npos)
    if (auto slashes = shown.find("//"); slashes != std::string::npos && slashes < at)
      shown = shown.substr(0, slashes + 2) + "***" + shown.substr(at);
  throw ConfigError(
      fmt::format("--remote-cache: '{}' is not a Redis URL redis://[user:password@]host:port[/db]: {}", shown, why));
}

[[noreturn]] void bad_cluster_url(std::string_view url, std::string_view why) {
  std::string shown(url);
  if (auto at = shown.rfind('@'); at != std::string::npos)
    shown = std::string(kRedisClusterScheme) + "***" + shown.substr(at);
  throw ConfigError(fmt::format(
      "--remote-cache: '{}' is not a Redis Cluster URL redis-cluster://[user:password@]host1:port1,host2:port2: {}",
      shown, why));
}

bool parse_int(std::string_view s, int lo, int hi, int& out) {
  if (s.empty() || s.size() > 10) return false;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

// Percent-decoding, so a password may contain ':', '@' or '/'.
bool decode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    int v = 0;
    auto [p, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16);
    if (ec != std::errc() || p != in.data() + i + 3) return false;
    out.push_back(static_cast<char>(v));
    i += 2;
  }
  return true;
}

}  // namespace

std::string RedisUrl::redacted() const {
  std::string auth;
  if (!user.empty() || !password.empty()) auth = fmt::format("{}:***@", user);
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("redis://{}{}{}{}:{}/{}", auth, v6 ? "[" : "", host, v6 ? "]" : "", port, db);
}

RedisUrl parse_redis_url(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (url.starts_with("rediss://")) bad(url, "TLS (rediss://) is not supported");
  if (url.starts_with("unix://")) bad(url, "unix sockets are not supported");
  if (!url.starts_with(kScheme)) bad(url, "it must start with redis://");
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) bad(url, "query parameters are not supported");
  RedisUrl u;
  // [user:password@]
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = auth.find(':');
    if (colon == std::string_view::npos) bad(url, "credentials must be user:password or :password");
    if (!decode(auth.substr(0, colon), u.user) || !decode(auth.substr(colon + 1), u.password))
      bad(url, "bad percent-encoding in the credentials");
    if (u.password.empty()) bad(url, "empty password");
  }
  // host[:port][/db]
  std::string_view hostport = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !parse_int(db, 0, 1 << 20, u.db)) bad(url, fmt::format("database '{}' is not a number", db));
  }
  std::string_view port;
  if (hostport.starts_with('[')) {  // [IPv6]
    const auto close = hostport.find(']');
    if (close == std::string_view::npos) bad(url, "unclosed '[' in the host");
    u.host = std::string(hostport.substr(1, close - 1));
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) bad(url, "junk after the host");
      port = after.substr(1);
      if (port.empty()) bad(url, "empty port");
    }
  } else {
    const auto colon = hostport.find(':');
    u.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = hostport.substr(colon + 1);
      if (port.empty()) bad(url, "empty port");
    }
  }
  if (u.host.empty()) bad(url, "no host");
  if (u.host.find_first_of(" \t\r\n/@") != std::string::npos) bad(url, "bad character in the host");
  if (!port.empty() && !parse_int(port, 1, 65535, u.port)) bad(url, fmt::format("port '{}' is not in 1..65535", port));
  return u;
}

std::vector<RedisUrl> parse_redis_cluster_url(std::string_view url) {
  auto bad_cluster = [&](std::string_view why) { bad_cluster_url(url, why); };
  if (!url.starts_with(kRedisClusterScheme)) bad_cluster("it must start with redis-cluster://");
  std::string_view rest = url.substr(kRedisClusterScheme.size());
  std::string auth;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    auth = std::string(rest.substr(0, at + 1));
    rest = rest.substr(at + 1);
  }
  if (rest.ends_with("/0")) rest.remove_suffix(2);
  else if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) bad_cluster("a cluster has only database 0");
  std::vector<RedisUrl> nodes;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view host = rest.substr(0, comma);
    if (host.empty()) bad_cluster("an empty node in the list");
    try {
      nodes.push_back(parse_redis_url("redis://" + auth + std::string(host)));
    } catch (const ConfigError&) {
      bad_cluster(fmt::format("bad node '{}'", host));
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return nodes;
}

std::string redacted_cluster_url(const std::vector<RedisUrl>& nodes) {
  std::string out(kRedisClusterScheme);
  if (!nodes.empty() && (!nodes[0].user.empty() || !nodes[0].password.empty()))
    out += fmt::format("{}:***@", nodes[0].user);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const bool v6 = nodes[i].host.find(':') != std::string::npos;
    out += fmt::format("{}{}{}{}:{}", i ? "," : "", v6 ? "[" : "", nodes[i].host, v6 ? "]" : "", nodes[i].port);
  }
  return out;
}

}  // namespace pagedkv::remote
