#include "pagedkv/tiers/remote_value_format.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/tiers/block_copy.h"
#include "pagedkv/tiers/remote_value_copy.h"

namespace pagedkv {

std::string remote_block_key(std::string_view prefix, const BlockHash& fingerprint, const BlockHash& block_hash) {
  return fmt::format("{}:{}:{}", prefix, fingerprint.hex(), block_hash.hex());
}

size_t remote_value_header_bytes(int block_size) { return block_header_field_bytes(block_size); }

namespace {

size_t checked_header_bytes(const StoredBlockKey& key, size_t payload_bytes, std::span<const std::byte> out) {
  const size_t header = remote_value_header_bytes(static_cast<int>(key.tokens.size()));
  if (out.size() < header + payload_bytes)
    throw UsageError(fmt::format("remote value needs {} bytes, buffer has {}", header + payload_bytes, out.size()));
  return header;
}

void encode_header(const StoredBlockKey& key, const BlockHash& fingerprint, size_t payload_bytes, uint64_t checksum,
                   std::span<std::byte> out, size_t header) {
  DiskSlotHeader h;
  h.fingerprint = fingerprint;
  h.key = key;
  h.payload_bytes = payload_bytes;
  h.payload_checksum = checksum;
  encode_block_header(h, out.first(header), kRemoteValueMagic, header);
}

// Everything but the payload checksum; on kOk, `checksum` is the one the header carries.
RemoteValueStatus check_header(std::span<const std::byte> value, const BlockHash& fingerprint,
                               const StoredBlockKey& expected, size_t payload_bytes, uint64_t& checksum) {
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
  checksum = h.payload_checksum;
  return RemoteValueStatus::kOk;
}

}  // namespace

void encode_remote_value_header(const StoredBlockKey& key, const BlockHash& fingerprint, size_t payload_bytes,
                                std::span<std::byte> out) {
  const size_t header = checked_header_bytes(key, payload_bytes, out);
  encode_header(key, fingerprint, payload_bytes, payload_checksum(out.subspan(header, payload_bytes)), out, header);
}

void pack_remote_value(const KVArena& source, int32_t block, const StoredBlockKey& key, const BlockHash& fingerprint,
                       std::span<std::byte> out) {
  const size_t payload_bytes = block_payload_bytes(source);
  const size_t header = checked_header_bytes(key, payload_bytes, out);
  // Exactly: the buffer is sent whole, and bytes the pack did not write would go out as they were.
  if (out.size() != header + payload_bytes)
    throw UsageError(fmt::format("remote value is {} bytes, buffer has {}", header + payload_bytes, out.size()));
  const uint64_t checksum = gather_block_checksummed(source, block, out.data() + header);
  encode_header(key, fingerprint, payload_bytes, checksum, out, header);
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
  uint64_t checksum = 0;
  const RemoteValueStatus st = check_header(value, fingerprint, expected, payload_bytes, checksum);
  if (st != RemoteValueStatus::kOk) return st;
  const auto body = value.last(payload_bytes);
  if (payload_checksum(body) != checksum) return RemoteValueStatus::kBadPayload;
  payload = body;
  return RemoteValueStatus::kOk;
}

RemoteValueStatus load_remote_value(std::span<const std::byte> value, const BlockHash& fingerprint,
                                    const StoredBlockKey& expected, KVArena& dest, int32_t block) {
  const size_t payload_bytes = block_payload_bytes(dest);
  uint64_t checksum = 0;
  const RemoteValueStatus st = check_header(value, fingerprint, expected, payload_bytes, checksum);
  if (st != RemoteValueStatus::kOk) return st;
  if (scatter_block_checksummed(value.last(payload_bytes).data(), dest, block) != checksum)
    return RemoteValueStatus::kBadPayload;
  return RemoteValueStatus::kOk;
}

}  // namespace pagedkv
