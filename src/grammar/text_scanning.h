// Helpers the text front ends share: hex digits, UTF-8 decoding, code point set operations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "pagedkv/grammar/grammar.h"

namespace pagedkv::grammar {

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes one UTF-8 code point of s at pos (advancing pos); false on invalid UTF-8.
inline bool decode_utf8(std::string_view s, size_t& pos, uint32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  int n = 0;
  if (b0 < 0x80) {
    cp = b0;
    n = 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    cp = b0 & 0x1Fu;
    n = 2;
  } else if ((b0 & 0xF0) == 0xE0) {
    cp = b0 & 0x0Fu;
    n = 3;
  } else if ((b0 & 0xF8) == 0xF0) {
    cp = b0 & 0x07u;
    n = 4;
  } else {
    return false;
  }
  if (pos + static_cast<size_t>(n) > s.size()) return false;
  for (int i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + static_cast<size_t>(i)]);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[n] || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  pos += static_cast<size_t>(n);
  return true;
}

// The code points not in `ranges` (any order, may overlap).
inline std::vector<CodepointRange> complement(std::vector<CodepointRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](CodepointRange a, CodepointRange b) { return a.lo < b.lo; });
  std::vector<CodepointRange> out;
  uint32_t next = 0;
  for (CodepointRange r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = std::max(next, r.hi + 1);
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return out;
}

// `ranges` without '"', '\\' and the control characters U+0000..U+001F: what a JSON string may
// hold without escapes.
inline std::vector<CodepointRange> json_safe_ranges(const std::vector<CodepointRange>& ranges) {
  static const CodepointRange kSafe[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}};
  std::vector<CodepointRange> out;
  for (CodepointRange r : ranges)
    for (CodepointRange s : kSafe) {
      const uint32_t lo = std::max(r.lo, s.lo), hi = std::min(r.hi, s.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  return out;
}

}  // namespace pagedkv::grammar
