// KV-cache memory math: how many bytes a token and a block take, and how many blocks a memory
// budget holds, computed the way vLLM and nano-vllm compute them at start-up.
//
// A block holds `block_size` tokens of K and V for every layer of its group, so
//   bytes per block per layer = 2 (K and V) x block_size x num_kv_heads x head_dim x dtype bytes
//   bytes per block           = bytes per block per layer x num_layers
// (Llama-2-70B, block 16, fp16: 2 x 16 x 8 x 128 x 2 = 65,536 and x 80 layers = 5,242,880.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

// Bytes of K plus V for one token across `num_layers` layers.
size_t kv_bytes_per_token(const KVCacheSpec& spec, int num_layers);
// Bytes one physical block occupies across `num_layers` layers (vLLM's cache_block_size).
size_t kv_bytes_per_block(const KVCacheSpec& spec, int num_layers);

// floor(budget_bytes / bytes_per_block); 0 when the budget is negative.
int64_t num_blocks_in_budget(double budget_bytes, size_t bytes_per_block);

// vLLM (Worker.profile_num_available_blocks): after a profiling forward pass, `peak_bytes` is
// everything in use at its peak (weights, activations, CUDA context), so the cache gets
//   floor((total x gpu_memory_utilization - peak) / bytes_per_block), at least 0.
int64_t num_gpu_blocks_vllm(uint64_t total_gpu_bytes, double gpu_memory_utilization, uint64_t peak_bytes,
                            size_t bytes_per_block);

// nano-vllm (ModelRunner.allocate_kv_cache): `used` is what the device reports in use after
// warm-up, `peak` and `current` are the allocator's peak and current bytes; peak - current is the
// warm-up's transient activations, which the cache must leave room for:
//   floor((total x gpu_memory_utilization - used - peak + current) / bytes_per_block), at least 0.
int64_t num_gpu_blocks_nano_vllm(uint64_t total_gpu_bytes, double gpu_memory_utilization, uint64_t used_bytes,
                                 uint64_t peak_bytes, uint64_t current_bytes, size_t bytes_per_block);

// vLLM's CPU swap blocks: floor(swap_space / bytes_per_block).
int64_t num_cpu_swap_blocks(uint64_t swap_space_bytes, size_t bytes_per_block);

// Blocks one request of `context_len` tokens holds at its largest. Full and cross attention:
// ceil(context_len / block_size). Sliding window: only the blocks the last token's window can
// span, ceil((window - 1) / block_size) + 1, when that is fewer (older blocks are released).
int64_t blocks_per_request(const KVCacheSpec& spec, int64_t context_len);
// The same while prefilling in chunks of `chunk_tokens`: a sliding-window group then holds the
// window before the chunk and the chunk, cdiv(min(window - 1 + chunk, context_len), block_size)
// + 1 blocks (vLLM's SlidingWindowSpec.max_memory_usage_bytes), at most all of them.
int64_t blocks_per_request(const KVCacheSpec& spec, int64_t context_len, int64_t chunk_tokens);

// How many requests of `context_len` tokens fit at once: num_blocks / blocks_per_request, as vLLM
// logs it ("Maximum concurrency for 4,096 tokens per request: 32.04x").
double max_concurrency(int64_t num_blocks, const KVCacheSpec& spec, int64_t context_len);

}  // namespace pagedkv
