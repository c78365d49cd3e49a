// How many blocks one request holds at most in a KV-cache group, by the group's attention kind:
// the rule the manager's admission check and the memory planner share.
#pragma once

#include <algorithm>
#include <cstdint>

#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

// Blocks a group of `spec` holds at its largest for a sequence of `tokens` tokens (for cross
// attention: the encoder's tokens) admitted `chunk_tokens` at a time. Full and cross attention
// keep every block: ceil(tokens / block_size). A sliding window keeps the window before the
// chunk and the chunk, plus one block of misalignment, at most all of them (vLLM's
// SlidingWindowSpec.max_memory_usage_bytes): min(all, ceil(min(window - 1 + chunk, tokens) /
// block_size) + 1).
constexpr int64_t block_footprint(const KVCacheSpec& spec, int64_t tokens, int64_t chunk_tokens) {
  const int64_t block_size = spec.block_size;
  const int64_t all = ceil_div(tokens, block_size);
  if (spec.kind != AttentionKind::kSlidingWindow) return all;
  const int64_t span = std::min(int64_t{spec.sliding_window} - 1 + chunk_tokens, tokens);
  return std::min(all, ceil_div(span, block_size) + 1);
}

}  // namespace pagedkv
