// X-Request-Id: a client's name for one request. The router passes it to the instance it chooses
// (or makes one up), both echo it in their answer's headers, and the instance names the response
// with it ("cmpl-<id>", "chatcmpl-<id>"), as vLLM does; logs of both sides then meet on it.
#pragma once

#include <string_view>

namespace pagedkv::api {

inline constexpr const char* kRequestIdHeader = "X-Request-Id";

// 1 to 128 characters of [A-Za-z0-9._:-]: anything else (too long, spaces, control characters
// that could forge a log line) is ignored and a fresh id used instead.
inline bool is_valid_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace pagedkv::api
