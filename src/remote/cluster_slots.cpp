#include "pagedkv/remote/cluster_slots.h"

#include <array>

namespace pagedkv::remote {
namespace {

constexpr std::array<uint16_t, 256> make_crc16_table() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    t[static_cast<size_t>(i)] = crc;
  }
  return t;
}
constexpr std::array<uint16_t, 256> kCrc16Table = make_crc16_table();

}  // namespace

uint16_t crc16_xmodem(std::string_view data) {
  uint16_t crc = 0;
  for (char ch : data)
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ static_cast<uint8_t>(ch)) & 0xff]);
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
