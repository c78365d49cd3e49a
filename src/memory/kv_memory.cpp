#include "pagedkv/memory/kv_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pagedkv/core/block_footprint.h"
#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

void require_positive_layers(int num_layers) {
  if (num_layers <= 0) throw ConfigError(fmt::format("num_layers must be positive, got {}", num_layers));
}

void require_utilization(double gpu_memory_utilization) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    throw ConfigError(fmt::format("gpu_memory_utilization must be in (0, 1], got {}", gpu_memory_utilization));
}

}  // namespace

size_t kv_bytes_per_token(const KVCacheSpec& spec, int num_layers) {
  require_positive_layers(num_layers);
  return spec.bytes_per_token_per_layer() * static_cast<size_t>(num_layers);
}

size_t kv_bytes_per_block(const KVCacheSpec& spec, int num_layers) {
  require_positive_layers(num_layers);
  return spec.bytes_per_block_per_layer() * static_cast<size_t>(num_layers);
}

int64_t num_blocks_in_budget(double budget_bytes, size_t bytes_per_block) {
  if (bytes_per_block == 0) throw ConfigError("bytes_per_block must be positive, got 0");
  if (!(budget_bytes >= 1.0)) return 0;  // negative, zero or NaN: nothing fits, as vLLM's max(n, 0)
  // floor(budget / b) == floor(floor(budget) / b) for integer b: divide in integers, exactly.
  const double whole = std::floor(std::min(budget_bytes, 9.0e18));
  return static_cast<int64_t>(static_cast<uint64_t>(whole) / bytes_per_block);
}

int64_t num_gpu_blocks_vllm(uint64_t total_gpu_bytes, double gpu_memory_utilization, uint64_t peak_bytes,
                            size_t bytes_per_block) {
  require_utilization(gpu_memory_utilization);
  // Evaluated in double, in the order vLLM's Python does.
  const double budget = static_cast<double>(total_gpu_bytes) * gpu_memory_utilization - static_cast<double>(peak_bytes);
  return num_blocks_in_budget(budget, bytes_per_block);
}

int64_t num_gpu_blocks_nano_vllm(uint64_t total_gpu_bytes, double gpu_memory_utilization, uint64_t used_bytes,
                                 uint64_t peak_bytes, uint64_t current_bytes, size_t bytes_per_block) {
  require_utilization(gpu_memory_utilization);
  const double budget = static_cast<double>(total_gpu_bytes) * gpu_memory_utilization -
                        static_cast<double>(used_bytes) - static_cast<double>(peak_bytes) +
                        static_cast<double>(current_bytes);
  return num_blocks_in_budget(budget, bytes_per_block);
}

int64_t num_cpu_swap_blocks(uint64_t swap_space_bytes, size_t bytes_per_block) {
  if (bytes_per_block == 0) throw ConfigError("bytes_per_block must be positive, got 0");
  return static_cast<int64_t>(swap_space_bytes / bytes_per_block);
}

int64_t blocks_per_request(const KVCacheSpec& spec, int64_t context_len) {
  spec.validate();
  if (context_len <= 0) throw ConfigError(fmt::format("context length must be positive, got {}", context_len));
  const int64_t block_size = spec.block_size;
  const int64_t all_blocks = ceil_div(context_len, block_size);
  if (spec.kind != AttentionKind::kSlidingWindow) return all_blocks;
  // The last token sees `sliding_window` tokens (itself included); at the worst alignment those
  // span ceil((window - 1) / block_size) + 1 blocks.
  const int64_t window_blocks = ceil_div(int64_t{spec.sliding_window} - 1, block_size) + 1;
  return std::min(all_blocks, window_blocks);
}

int64_t blocks_per_request(const KVCacheSpec& spec, int64_t context_len, int64_t chunk_tokens) {
  const int64_t all_blocks = blocks_per_request(KVCacheSpec{.kind = AttentionKind::kFull,
                                                            .block_size = spec.block_size,
                                                            .num_kv_heads = spec.num_kv_heads,
                                                            .head_dim = spec.head_dim,
                                                            .dtype = spec.dtype,
                                                            .sliding_window = 0},
                                                context_len);
  if (spec.kind != AttentionKind::kSlidingWindow) return all_blocks;
  if (chunk_tokens <= 0) throw ConfigError(fmt::format("prefill chunk must be positive, got {}", chunk_tokens));
  return block_footprint(spec, context_len, chunk_tokens);
}

double max_concurrency(int64_t num_blocks, const KVCacheSpec& spec, int64_t context_len) {
  return static_cast<double>(num_blocks) / static_cast<double>(blocks_per_request(spec, context_len));
}

}  // namespace pagedkv
