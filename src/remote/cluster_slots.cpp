#include "pagedkv/remote/cluster_slots.h"

#include <array>

namespace pagedkv::remote {
namespace {

// Slicing by 8: kCrc16Tables[k][x] is the CRC of byte x followed by k zero bytes, so eight bytes
// fold in with eight lookups that do not wait on each other (a key is hashed on every call that
// names it; byte by byte was 3 % of a tier lane's time).
using Crc16Tables = std::array<std::array<uint16_t, 256>, 8>;

constexpr Crc16Tables make_crc16_tables() {
  Crc16Tables t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    t[0][static_cast<size_t>(i)] = crc;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t i = 0; i < 256; ++i) {
      const uint16_t prev = t[k - 1][i];
      t[k][i] = static_cast<uint16_t>((prev << 8) ^ t[0][prev >> 8]);
    }
  return t;
}
constexpr Crc16Tables kCrc16Tables = make_crc16_tables();

}  // namespace

uint16_t crc16_xmodem(std::string_view data) {
  const auto& t = kCrc16Tables;
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = data.size();
  uint16_t crc = 0;
  for (; n >= 8; p += 8, n -= 8)
    crc = static_cast<uint16_t>(t[7][p[0] ^ (crc >> 8)] ^ t[6][p[1] ^ (crc & 0xff)] ^ t[5][p[2]] ^ t[4][p[3]] ^
                                t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]);
  for (; n > 0; ++p, --n) crc = static_cast<uint16_t>((crc << 8) ^ t[0][(crc >> 8) ^ *p]);
  return crc;
}

std::string_view cluster_hash_tag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;  // no '}', or "{}": the whole key
  return key.substr(open + 1, close - open - 1);
}

int cluster_key_slot(std::string_view key) { return crc16_xmodem(cluster_hash_tag(key)) % kClusterSlots; }

}  // namespace pagedkv::remote
