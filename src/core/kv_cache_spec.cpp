#include "pagedkv/core/kv_cache_spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "pagedkv/core/error.h"

namespace pagedkv {

std::string_view attention_kind_name(AttentionKind k) {
  switch (k) {
    case AttentionKind::kFull:
      return "full";
    case AttentionKind::kSlidingWindow:
      return "sliding_window";
    case AttentionKind::kCrossAttention:
      return "cross_attention";
  }
  return "?";
}

void KVCacheSpec::validate() const {
  if (block_size <= 0) throw ConfigError(fmt::format("block_size must be positive, got {}", block_size));
  if (num_kv_heads <= 0) throw ConfigError(fmt::format("num_kv_heads must be positive, got {}", num_kv_heads));
  if (head_dim <= 0) throw ConfigError(fmt::format("head_dim must be positive, got {}", head_dim));
  if (kind == AttentionKind::kSlidingWindow && sliding_window <= 0)
    throw ConfigError(fmt::format("sliding_window must be positive for a sliding-window spec, got {}", sliding_window));
}

int KVCacheConfig::block_size() const {
  int smallest = 0;
  for (const auto& g : groups)
    if (smallest == 0 || g.spec.block_size < smallest) smallest = g.spec.block_size;
  return smallest;
}

int KVCacheConfig::max_block_size() const {
  int largest = 0;
  for (const auto& g : groups) largest = std::max(largest, g.spec.block_size);
  return largest;
}

size_t KVCacheConfig::bytes_per_block() const {
  size_t bytes = 0;
  for (const auto& g : groups)
    bytes = std::max(bytes, g.spec.bytes_per_block_per_layer() * static_cast<size_t>(g.num_layers));
  return bytes;
}

int uniform_group_layers(int fewest, int most) { return static_cast<double>(most) < 1.25 * fewest ? most : fewest; }

void KVCacheConfig::validate() const {
  if (groups.empty()) throw ConfigError("KV cache config has no groups");
  if (num_blocks < 2)
    throw ConfigError(fmt::format("num_blocks must be at least 2 (block 0 is reserved), got {}", num_blocks));
  for (const auto& g : groups) {
    g.spec.validate();
    if (g.num_layers <= 0) throw ConfigError(fmt::format("num_layers must be positive, got {}", g.num_layers));
  }
  // Checked after every spec: block_size() of a group with a non-positive size means nothing.
  for (const auto& g : groups) {
    if (g.spec.block_size % block_size() != 0)
      throw ConfigError(fmt::format("every KV cache group's block size must be a multiple of the smallest ({}), got {}",
                                    block_size(), g.spec.block_size));
  }
}

}  // namespace pagedkv
