// One pass over a KV block that moves it between an arena and a remote value's payload and
// checksums it on the way (payload_checksum, disk_slot_format.h: XXH3-64 of the payload bytes).
//
// Packing a value used to copy the block out of the arena and then read the copy again for its
// checksum; loading one read the payload for its checksum and then again to scatter it. Here
// each page is copied in pieces small enough to stay in L1, and each piece is hashed right after
// it is copied, so the payload crosses memory once. A load's copy into the arena is streamed
// (CopyWrites below). The checksum is the same bits as
// payload_checksum of the whole payload (XXH3's streaming form), so values stay compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pagedkv/storage/kv_arena.h"

namespace pagedkv {

// Packs block `block` of `arena` into `payload` (block_payload_bytes of it, [layer][K, V] pages,
// as gather_block) and returns payload_checksum of the bytes written.
uint64_t gather_block_checksummed(const KVArena& arena, int32_t block, std::byte* payload);

// Unpacks `payload` into block `block` of `arena` (as scatter_block) and returns
// payload_checksum of `payload`. The block is written before the caller can compare the
// checksum: on a mismatch its contents are garbage and it must not be used as KV.
uint64_t scatter_block_checksummed(const std::byte* payload, KVArena& arena, int32_t block);

// One contiguous move: `bytes` from `from` to `to`.
struct ChecksummedPiece {
  const std::byte* from = nullptr;
  std::byte* to = nullptr;
  size_t bytes = 0;
};

namespace tiers_detail {
// How a copy writes its destination: through the cache, or with non-temporal stores, which
// neither read each destination line first (read for ownership) nor leave it in the cache.
enum class CopyWrites : uint8_t { kThroughCache, kStreaming };

// Copies every piece in order and returns XXH3-64 of the concatenated bytes. The portable build
// writes through the cache; the AVX2 build (chosen at run time) as `writes` says, fenced before
// it returns. Both write and return the same bits.
uint64_t copy_checksummed_portable(std::span<const ChecksummedPiece> pieces);
uint64_t copy_checksummed_avx2(std::span<const ChecksummedPiece> pieces, CopyWrites writes);
}  // namespace tiers_detail

}  // namespace pagedkv
