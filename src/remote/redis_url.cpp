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
  throw ConfigError(fmt::format("--remote-cache: '{}' is not a Redis URL redis://[user:password@]host:port[/db]: {}",
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

}  // namespace pagedkv::remote
