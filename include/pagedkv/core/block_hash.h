// The 128-bit identity of a full block's content and everything before it (a chained hash).
// Its bytes are stable across processes and machines: it can key caches on disk and in routers.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace pagedkv {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  constexpr auto operator<=>(const BlockHash&) const = default;
  std::string hex() const;  // 32 lowercase hex digits, hi then lo
};

// The inverse of hex(): exactly 32 hex digits (either case), else nullopt.
std::optional<BlockHash> parse_block_hash_hex(std::string_view text);

}  // namespace pagedkv

template <>
struct std::hash<pagedkv::BlockHash> {
  size_t operator()(const pagedkv::BlockHash& h) const noexcept { return h.lo; }
};
