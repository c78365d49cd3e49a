// A KV-cache memory plan: given a model and either a KV budget or a GPU, how big blocks are,
// how many fit, and how many requests of a given context length they serve at once.
// This is what `pagedkv plan` prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "pagedkv/core/dtype.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/memory/gpu_spec.h"
#include "pagedkv/memory/model_shape.h"

namespace pagedkv {

// vLLM's default share of device memory the engine may use.
inline constexpr double kDefaultGpuMemoryUtilization = 0.9;
// Reserved on a GPU besides the weights: CUDA context, cuBLAS/NCCL workspaces and the activation
// peak of a forward pass. vLLM measures it by profiling; a plan cannot, so it reserves this
// unless told otherwise (docs/plan.md).
inline constexpr uint64_t kDefaultOverheadBytes = uint64_t{2} << 30;  // 2 GiB
// The default context length is the model's max_position_embeddings, capped here so that
// million-token configs do not make every plan report a concurrency far below 1.
inline constexpr int64_t kDefaultContextLenCap = 131072;

struct PlanOptions {
  int block_size = 16;
  std::optional<DType> kv_dtype;  // default: the model's dtype, else fp16
  // The KV budget: given directly, or derived from a GPU (exactly one of the two).
  std::optional<uint64_t> kv_memory_bytes;
  std::optional<GpuSpec> gpu;
  double gpu_memory_utilization = kDefaultGpuMemoryUtilization;  // with gpu
  std::optional<DType> weights_dtype;  // with gpu; default: the model's dtype, else fp16
  uint64_t overhead_bytes = kDefaultOverheadBytes;  // with gpu
  uint64_t swap_space_bytes = 0;  // CPU swap space for swapped-out blocks
  std::optional<int64_t> context_len;  // default: min(max_position_embeddings, cap)
};

// How a GPU's memory was divided (present when the plan started from a GPU).
struct GpuBudget {
  GpuSpec gpu;
  double gpu_memory_utilization = 0;
  DType weights_dtype = DType::kF16;
  uint64_t weights_bytes = 0;  // num_params x bytes of weights_dtype
  uint64_t overhead_bytes = 0;
};

struct MemoryPlan {
  ModelShape model;
  KVCacheSpec spec;  // one layer's spec (block size, KV heads, dtype, window)
  size_t bytes_per_token = 0;  // all layers
  size_t bytes_per_block_per_layer = 0;
  size_t bytes_per_block = 0;  // all layers
  uint64_t kv_memory_bytes = 0;  // the budget the blocks were carved from
  std::optional<GpuBudget> gpu;
  int64_t num_blocks = 0;
  int64_t token_capacity = 0;  // num_blocks x block_size
  int64_t context_len = 0;
  int64_t blocks_per_request = 0;  // at context_len
  double max_concurrency = 0;  // num_blocks / blocks_per_request
  uint64_t swap_space_bytes = 0;
  int64_t num_cpu_blocks = 0;
};

// Throws ConfigError for inconsistent options (both or neither budget, utilization outside
// (0, 1], bad block size or context length) and when the model's weights and overhead leave no
// room on the GPU, or the budget holds no block at all; the message gives the figures.
MemoryPlan plan_memory(const ModelShape& model, const PlanOptions& options);

}  // namespace pagedkv
