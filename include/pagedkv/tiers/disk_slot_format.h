// The on-disk format of one disk-tier slot, and the fingerprint that says what its bytes mean.
//
// A slot is a header followed by the block's payload, both multiples of 4096 bytes so the slot
// can be read and written with O_DIRECT:
//
//   offset  size  field (little-endian)
//        0     8  magic "PKVSLOT1"
//        8     4  format version (1)
//       12     4  header bytes (this header's size, a multiple of 4096)
//       16    16  fingerprint: model weights + KV layout + hashing (kv_layout_fingerprint)
//       32    16  block hash (lo, hi)
//       48    16  parent hash (lo, hi)
//       64     8  extra-keys digest
//       72     2  KV-cache group
//       74     2  flags: bit 0 = a swapped-out request's private block (never indexed)
//       76     4  token count n (the block size)
//       80     8  payload bytes (unpadded)
//       88     8  payload checksum: XXH3-64 of the unpadded payload
//       96     8  sequence number: a per-file write counter (recency when the index is rebuilt)
//      104    4n  token ids (int32)
//   104+4n     8  header checksum: XXH3-64 of bytes [0, 104 + 4n)
// The payload is the block's K and V for every layer, [layer][K, V][block_size][kv_heads][head_dim]
// in the arena's dtype, zero-padded to a multiple of 4096.
//
// A torn write cannot pass as a block: a partly written header fails its checksum, and a header
// written without all of its payload fails the payload checksum when the block is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/prefix/block_hasher.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

inline constexpr uint64_t kDiskSlotMagic = 0x31544F4C53564B50ull;  // "PKVSLOT1"
inline constexpr uint32_t kDiskSlotFormatVersion = 1;
inline constexpr size_t kDiskAlignment = 4096;

constexpr size_t round_up_to(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Bytes of a slot header for blocks of `block_size` tokens.
size_t disk_header_bytes(int block_size);

struct DiskSlotHeader {
  BlockHash fingerprint;
  StoredBlockKey key;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
  uint64_t sequence = 0;
  uint16_t flags = 0;
};
inline constexpr uint16_t kSlotFlagPrivate = 1;

// Writes `h` into `out` (disk_header_bytes(h.key.tokens.size()) bytes; the rest is zeroed).
void encode_slot_header(const DiskSlotHeader& h, std::span<std::byte> out);

enum class SlotHeaderStatus {
  kOk,
  kEmpty,  // never written (zero magic)
  kBadMagic,
  kBadVersion,
  kBadChecksum,  // torn or corrupted header
  kFingerprintMismatch,  // written for another model or layout
  kBadLayout,  // token count or payload size not this tier's
};
std::string_view slot_header_status_name(SlotHeaderStatus s);

// Decodes and validates a header against the running tier's fingerprint and layout.
SlotHeaderStatus decode_slot_header(std::span<const std::byte> in, const BlockHash& fingerprint, int block_size,
                                    uint64_t payload_bytes, DiskSlotHeader& out);

// The same fields under another magic and header size (the remote tier's values carry them
// unpadded: see remote_value_format.h). `header_bytes` must hold 104 + 4n + 8 bytes.
void encode_block_header(const DiskSlotHeader& h, std::span<std::byte> out, uint64_t magic, size_t header_bytes);
SlotHeaderStatus decode_block_header(std::span<const std::byte> in, uint64_t magic, size_t header_bytes,
                                     const BlockHash& fingerprint, int block_size, uint64_t payload_bytes,
                                     DiskSlotHeader& out);
// Bytes of the header fields for blocks of `block_size` tokens, before any padding.
size_t block_header_field_bytes(int block_size);

uint64_t payload_checksum(std::span<const std::byte> payload);

// What a stored block's bytes mean: the model's weights (a digest the caller computes, e.g. over
// the checkpoint), the KV layout (layers, block size, KV heads, head_dim, dtype) and the block
// hashing (algorithm and root hash, which covers the seed). A block from any other combination
// must never be handed to attention.
BlockHash kv_layout_fingerprint(uint64_t model_digest, const KVCacheSpec& spec, int num_layers,
                                HashAlgorithm hash_algorithm, const BlockHash& hash_root);

}  // namespace pagedkv
