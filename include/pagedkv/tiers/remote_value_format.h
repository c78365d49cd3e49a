// The remote tier's keys and values: what one KV block looks like in a shared key-value store.
//
// Key:   <prefix>:<fingerprint, 32 hex>:<block hash, 32 hex>
//   The fingerprint (kv_layout_fingerprint) names the model's weights, the KV layout and the
//   block hashing (algorithm and root, which covers the configured seed), so processes and
//   machines running the same model and configuration agree on every key, and others never
//   share one. The chained block hash already covers the whole prefix, cache_salt, LoRA and
//   multimodal extra keys, so tenants with different salts never meet on a key.
// Value: the disk slot's header fields (disk_slot_format.h) under the magic "PKVREMV1", unpadded
//   (104 + 4n + 8 bytes for n-token blocks), then the block's payload ([layer][K, V] pages).
//   A reader checks magic, version, header checksum, fingerprint, layout, the full content key
//   (hash, parent hash, the block's token ids, extra-keys digest) and the payload checksum; a
//   value that fails any check is a miss, never KV for attention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/tiers/disk_slot_format.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

inline constexpr uint64_t kRemoteValueMagic = 0x31564D4552564B50ull;  // "PKVREMV1"

std::string remote_block_key(std::string_view prefix, const BlockHash& fingerprint, const BlockHash& block_hash);

// Bytes of a value's header, and of a whole value, for n-token blocks with `payload_bytes` of KV.
size_t remote_value_header_bytes(int block_size);
inline size_t remote_value_bytes(int block_size, size_t payload_bytes) {
  return remote_value_header_bytes(block_size) + payload_bytes;
}

// Writes the header of a value whose payload already sits at out[header_bytes, +payload_bytes):
// computes the payload checksum and encodes `key` and `fingerprint`.
void encode_remote_value_header(const StoredBlockKey& key, const BlockHash& fingerprint, size_t payload_bytes,
                                std::span<std::byte> out);

// Packs block `block` of `source` under `key` into `out`, which must be exactly remote_value_bytes
// long (every byte written): the payload copied and checksummed in one pass
// (remote_value_copy.h), then the header. Throws UsageError for any other size.
void pack_remote_value(const KVArena& source, int32_t block, const StoredBlockKey& key, const BlockHash& fingerprint,
                       std::span<std::byte> out);

enum class RemoteValueStatus : uint8_t {
  kOk,
  kTruncated,  // shorter or longer than a value of this layout
  kBadHeader,  // magic, version, header checksum or layout
  kFingerprintMismatch,  // written for another model, layout or hashing
  kKeyMismatch,  // another block's content (hash collision or a misfiled value)
  kBadPayload,  // payload checksum
};
std::string_view remote_value_status_name(RemoteValueStatus s);

// Checks `value` against everything above; on kOk, `payload` is the block's bytes inside `value`.
RemoteValueStatus verify_remote_value(std::span<const std::byte> value, const BlockHash& fingerprint,
                                      const StoredBlockKey& expected, size_t payload_bytes,
                                      std::span<const std::byte>& payload);

// The same checks, with the payload scattered into block `block` of `dest` as it is checksummed
// (one pass, remote_value_copy.h). The block is written only once the header checks pass; on
// kBadPayload it has been overwritten with the value's bytes and must not be used as KV.
RemoteValueStatus load_remote_value(std::span<const std::byte> value, const BlockHash& fingerprint,
                                    const StoredBlockKey& expected, KVArena& dest, int32_t block);

}  // namespace pagedkv
