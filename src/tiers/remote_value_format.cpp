#include "pagedkv/tiers/remote_value_format.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

std::string remote_block_key(std::string_view prefix, const BlockHash& fingerprint, const BlockHash& block_hash) {
  return fmt::format("{}:{}:{}", prefix, fingerprint.hex(), block_hash.hex());
}

size_t remote_value_header_bytes(int block_size) { return block_header_field_bytes(block_size); }

void encode_remote_value_header(const StoredBlockKey& key, const BlockHash& fingerprint, size_t payload_bytes,
                                std::span<std::byte> out) {
  const size_t header = remote_value_header_bytes(static_cast<int>(key.tokens.size()));
  if (out.size() < header + payload_bytes)
    throw UsageError(fmt::format("remote value needs {} bytes, buffer has {}", header + payload_bytes, out.size()));
  DiskSlotHeader h;
  h.fingerprint = fingerprint;
  h.key = key;
  h.payload_bytes = payload_bytes;
  h.payload_checksum = payload_checksum(out.subspan(header, payload_bytes));
  encode_block_header(h, out.first(header), kRemoteValueMagic, header);
}

std::string_view remote_value_status_name(RemoteValueStatus s) {
  switch (s) {
    case RemoteValueStatus::kOk:
      return "ok";
    case RemoteValueStatus::kTruncated:
      return "wrong size";
    case RemoteValueStatus::kBadHeader:
      return "bad header";
    case RemoteValueStatus::kFingerprintMismatch:
      return "fingerprint mismatch";
    case RemoteValueStatus::kKeyMismatch:
      return "content key mismatch";
    case RemoteValueStatus::kBadPayload:
      return "payload checksum mismatch";
  }
  return "?";
}

RemoteValueStatus verify_remote_value(std::span<const std::byte> value, const BlockHash& fingerprint,
                                      const StoredBlockKey& expected, size_t payload_bytes,
                                      std::span<const std::byte>& payload) {
  const int block_size = static_cast<int>(expected.tokens.size());
  const size_t header = remote_value_header_bytes(block_size);
  if (value.size() != header + payload_bytes) return RemoteValueStatus::kTruncated;
  DiskSlotHeader h;
  switch (
      decode_block_header(value.first(header), kRemoteValueMagic, header, fingerprint, block_size, payload_bytes, h)) {
    case SlotHeaderStatus::kOk:
      break;
    case SlotHeaderStatus::kFingerprintMismatch:
      return RemoteValueStatus::kFingerprintMismatch;
    default:
      return RemoteValueStatus::kBadHeader;
  }
  if (h.flags != 0 || !expected.matches(h.key.view())) return RemoteValueStatus::kKeyMismatch;
  const auto body = value.subspan(header, payload_bytes);
  if (payload_checksum(body) != h.payload_checksum) return RemoteValueStatus::kBadPayload;
  payload = body;
  return RemoteValueStatus::kOk;
}

}  // namespace pagedkv
