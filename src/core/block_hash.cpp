#include "pagedkv/core/block_hash.h"

#include <fmt/format.h>

namespace pagedkv {

std::string BlockHash::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

std::optional<BlockHash> parse_block_hash_hex(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  auto half = [](std::string_view digits, uint64_t& out) {
    out = 0;
    for (char c : digits) {
      int v;
      if (c >= '0' && c <= '9') v = c - '0';
      else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
      else return false;
      out = (out << 4) | static_cast<uint64_t>(v);
    }
    return true;
  };
  BlockHash h;
  if (!half(text.substr(0, 16), h.hi) || !half(text.substr(16), h.lo)) return std::nullopt;
  return h;
}

}  // namespace pagedkv
