// Redis Cluster's key slots: a key belongs to slot CRC16(k) mod 16384, where CRC16 is the XMODEM
// variant (polynomial 0x1021, initial value 0) and k is the key's hash tag when it has one: the
// bytes between its first '{' and the first '}' after it, if there is at least one byte between
// them; otherwise the whole key. Keys that must live on one node share a tag ("{user1}.a").
#pragma once

#include <cstdint>
#include <string_view>

namespace pagedkv::remote {

inline constexpr int kClusterSlots = 16384;

uint16_t crc16_xmodem(std::string_view data);
// The part of `key` that is hashed (the hash tag's content, or the whole key).
std::string_view cluster_hash_tag(std::string_view key);
int cluster_key_slot(std::string_view key);

}  // namespace pagedkv::remote
