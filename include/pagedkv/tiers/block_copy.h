// Whole-block byte movements between KV arenas and contiguous buffers, for the tiers.
//
// In an arena a block is scattered over 2 x num_layers planes (each layer's K and V); its
// "payload" is the same bytes packed contiguously, [layer][K, V] pages of
// bytes_per_block_per_layer / 2 each: the form a block takes in a disk slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "pagedkv/core/ids.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv {

// Bytes of one block's payload (all layers, K and V).
inline size_t block_payload_bytes(const KVArena& arena) { return arena.bytes_per_block(); }

// Packs block `block` of `arena` into `out` (block_payload_bytes bytes).
void gather_block(const KVArena& arena, int32_t block, std::byte* out);
// Unpacks a payload into block `block` of `arena`.
void scatter_block(const std::byte* in, KVArena& arena, int32_t block);

// Copies block src[i] of `from` to block dst[i] of `to` for every pair (the arenas must have
// the same layer count and page layout; block counts may differ). Pairs are sorted, and runs of
// consecutive blocks on both sides move with one memcpy per plane. Returns the number of runs.
// Throws UsageError for mismatched arenas or block ids out of range.
size_t copy_block_runs(const KVArena& from, KVArena& to, std::span<const std::pair<int32_t, int32_t>> src_dst);

}  // namespace pagedkv
