// Operations on the physical KV cache: writing a step's new keys and values into their slots,
// copying whole blocks (copy-on-write inside an arena, swap and offload between arenas), and
// reading a request's K/V back into a contiguous buffer.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "pagedkv/core/ids.h"
#include "pagedkv/storage/cpu_isa.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv {

// vLLM's reshape_and_cache: write num_tokens new K/V rows (f32, [num_tokens][num_kv_heads][head_dim])
// into their slots, converting to the layer's dtype (round-to-nearest-even); int8 and fp8 rows
// are quantized here, each (token, head) row with its own scale (storage/kv_quantize.h). A slot
// of -1 is skipped (padding). Throws UsageError for a slot outside the layer. isa picks the
// conversions' and the int8 key rows' build (kAuto: best_available_isa(); every build stores the
// same bytes), so a benchmark can hold the reference against the default in one run.
void write_kv(const KVLayerView& layer, const float* key, const float* value, const int64_t* slot_mapping,
              int num_tokens, KernelIsa isa = KernelIsa::kAuto);

// Copy whole blocks (all layers, K and V) inside one arena: copy-on-write pairs (src, dst).
// Pairs are applied in order. Throws UsageError for a block id out of range.
void copy_blocks(KVArena& arena, std::span<const std::pair<BlockId, BlockId>> src_dst);

// Copy blocks between two arenas of identical spec/layers (swap, offload): src_arena[src] -> dst_arena[dst].
// Throws UsageError if the arenas' layouts differ or a block id is out of range.
void copy_blocks_between(const KVArena& src, KVArena& dst, std::span<const std::pair<BlockId, BlockId>> src_dst);

// Gather one request's first num_tokens K and V rows of a layer into contiguous f32 buffers
// of shape [num_tokens][num_kv_heads][head_dim] (debugging and tests); int8/fp8 are dequantized.
void gather_kv(const KVLayerView& layer, const int32_t* block_table_row, int num_tokens, float* key_out,
               float* value_out);

}  // namespace pagedkv
