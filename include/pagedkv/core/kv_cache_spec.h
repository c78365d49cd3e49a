// What one KV-cache group stores per token, declared once and read by every layer above:
// the manager (how blocks are allocated and cached), the memory math (how many blocks fit),
// the storage arena (how bytes are laid out) and the kernels (how they are read).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pagedkv/core/dtype.h"

namespace pagedkv {

enum class AttentionKind {
  kFull,  // every token attends to all earlier tokens; blocks prefix-cacheable
  kSlidingWindow,  // tokens attend to the last `sliding_window` tokens; older blocks released
  kCrossAttention,  // decoder attends to a fixed encoder output; allocated once, never cached
};

std::string_view attention_kind_name(AttentionKind k);

struct KVCacheSpec {
  AttentionKind kind = AttentionKind::kFull;
  int block_size = 16;  // tokens per block
  int num_kv_heads = 1;
  int head_dim = 1;
  DType dtype = DType::kF16;
  int sliding_window = 0;  // kSlidingWindow: window length in tokens (> 0)

  // Bytes of K plus V for one token in one layer, the per-head scales of int8/fp8 included.
  size_t bytes_per_token_per_layer() const {
    const auto heads = static_cast<size_t>(num_kv_heads);
    const size_t scales = dtype_has_row_scale(dtype) ? heads * kKVScaleBytes : 0;
    return 2 * (dtype_bytes(dtype, heads * static_cast<size_t>(head_dim)) + scales);
  }
  // Bytes of K plus V for one block in one layer (vLLM's page_size_bytes).
  size_t bytes_per_block_per_layer() const { return bytes_per_token_per_layer() * static_cast<size_t>(block_size); }
  // Throws ConfigError naming the bad field.
  void validate() const;
};

// The most KV-cache groups a cache may have. The manager keeps per-request state in fixed arrays
// of this many groups (no allocation on a decode step). vLLM's grouping rule makes 7 groups for
// Gemma 3 (52 sliding layers in groups of 10); 16 leaves room for models with more layer kinds.
inline constexpr int kMaxKVCacheGroups = 16;

// vLLM's rule for how many layers one KV-cache group holds (uniform page size: every group's
// page carries the same number of layers), when each kind of layer has between `fewest` and
// `most` layers: all of the largest kind when the counts are close (most < 1.25 x fewest, a few
// padding layers), else the smallest kind's count. Each kind then fills ceil(n / result) groups.
int uniform_group_layers(int fewest, int most);

// A set of layers that share one block table per request (vLLM's KVCacheGroupSpec).
struct KVCacheGroupSpec {
  KVCacheSpec spec;
  int num_layers = 1;
};

// The whole cache: a pool of `num_blocks` physical blocks shared by every group. A physical
// block holds one page for every layer of the group that owns it: that group's block_size
// tokens. Groups may have different block sizes (vLLM's hybrid allocator scales them so every
// group's page has the same bytes; see memory/hybrid_model.h), each a multiple of the smallest,
// which is the granularity of the prefix hashes.
struct KVCacheConfig {
  int num_blocks = 0;  // including the reserved null block 0
  std::vector<KVCacheGroupSpec> groups;

  // The smallest group's block size: prefix hashes are computed per block of this many tokens.
  int block_size() const;
  // The largest group's block size (tokens a physical block may hold).
  int max_block_size() const;
  bool uniform_block_size() const { return block_size() == max_block_size(); }
  // Bytes one physical block occupies (the largest group's per-block footprint).
  size_t bytes_per_block() const;
  // Throws ConfigError: no groups, a block size that is not a multiple of the smallest, fewer
  // than 2 blocks, bad spec.
  void validate() const;
};

}  // namespace pagedkv
