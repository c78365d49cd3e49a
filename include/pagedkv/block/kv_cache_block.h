// Metadata of one physical KV block (vLLM's KVCacheBlock). The bytes live in a storage arena;
// this struct only says who uses the block, what it holds, and where it sits in the free queue.
#pragma once

#include <cstdint>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"

namespace pagedkv {

// Index links are int32 (kNoLink = none): half the size of pointers and stable under copies.
inline constexpr int32_t kNoLink = -1;

// One cache line each: a lookup, a free-queue splice or a ref-count change touches one line per
// block (at 56 bytes, three blocks in four straddled two lines).
struct alignas(64) KVCacheBlock {
  BlockId id;
  int32_t ref_cnt = 0;  // number of block-table entries that point here
  // Prefix-cache identity, set when the block is full and registered in the cached-block map.
  BlockHash hash;
  bool has_hash = false;
  bool is_null = false;  // the reserved null block: never allocated, never freed
  bool in_free_queue = false;  // maintained by the free-set owner (queue or eviction policy)
  // A sliding-window block kept as a retention checkpoint (see BlockPool::free_window_blocks);
  // meaningful while has_hash.
  bool window_checkpoint = false;
  uint16_t group = 0;  // KV-cache group whose cache map holds it (when has_hash)
  int32_t num_tokens = 0;  // tokens recorded for the cached content (block_size when cached)
  uint32_t hit_count = 0;  // prefix hits since it was cached (offload and LFU policies)
  // Intrusive links: the free queue (or a policy's lists), and the chain of equal-hash blocks.
  int32_t prev_free = kNoLink;
  int32_t next_free = kNoLink;
  int32_t next_same_hash = kNoLink;
  uint32_t policy_tag = 0;  // scratch for eviction policies (e.g. which list a block is on)
};

}  // namespace pagedkv
