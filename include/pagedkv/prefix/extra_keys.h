// Extra keys: what besides token ids decides whether two blocks hold the same KV.
//   - the LoRA adapter (different weights, different KV),
//   - multimodal inputs (placeholder tokens are equal; the image/audio hash is not), with the
//     input's offset so the same image at another position is another block,
//   - a per-request cache salt mixed into the first block: requests with different salts never
//     share blocks (tenant isolation).
// Serialized per block as tagged little-endian fields:
//   'L' u64 lora_id                           (when lora_id != 0)
//   'M' u64 hash.lo u64 hash.hi i32 offset    (each input overlapping the block, in order)
//   'S' u32 length bytes[length]              (block 0 only, when the salt is not empty)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "pagedkv/core/block_hash.h"

namespace pagedkv {

struct MultiModalInput {
  BlockHash hash;  // content hash of the image/audio/... (caller computed)
  int32_t offset = 0;  // first placeholder token position in the prompt
  int32_t length = 0;  // number of placeholder tokens
};

struct PrefixKeys {
  uint64_t lora_id = 0;  // 0: no adapter
  std::span<const MultiModalInput> mm_inputs;  // sorted by offset
  std::string_view cache_salt;
  bool empty() const { return lora_id == 0 && mm_inputs.empty() && cache_salt.empty(); }
};

// Appends the extra-key bytes of block `block_index` (tokens [start, start+block_size)) to `out`.
void append_extra_keys(const PrefixKeys& keys, int block_index, int block_size, std::vector<std::byte>& out);

}  // namespace pagedkv
