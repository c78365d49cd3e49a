#include "pagedkv/memory/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pagedkv/core/error.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/memory/kv_memory.h"

namespace pagedkv {

MemoryPlan plan_memory(const ModelShape& model, const PlanOptions& options) {
  model.validate();
  if (options.kv_memory_bytes.has_value() == options.gpu.has_value())
    throw ConfigError(options.gpu ? "give either a KV memory budget or a GPU, not both"
                                  : "give a KV memory budget or a GPU to derive it from");
  if (options.block_size <= 0)
    throw ConfigError(fmt::format("block size must be positive, got {}", options.block_size));

  MemoryPlan plan;
  plan.model = model;
  plan.spec = model.kv_cache_spec(options.block_size, options.kv_dtype.value_or(model.dtype.value_or(DType::kF16)));
  plan.bytes_per_token = kv_bytes_per_token(plan.spec, model.num_layers);
  plan.bytes_per_block_per_layer = plan.spec.bytes_per_block_per_layer();
  plan.bytes_per_block = kv_bytes_per_block(plan.spec, model.num_layers);

  if (options.gpu) {
    const GpuSpec& gpu = *options.gpu;
    const double util = options.gpu_memory_utilization;
    if (!(util > 0.0 && util <= 1.0))
      throw ConfigError(fmt::format("gpu_memory_utilization must be in (0, 1], got {}", util));
    GpuBudget budget{.gpu = gpu,
                     .gpu_memory_utilization = util,
                     .weights_dtype = options.weights_dtype.value_or(model.dtype.value_or(DType::kF16)),
                     .weights_bytes = 0,
                     .overhead_bytes = options.overhead_bytes};
    budget.weights_bytes = dtype_bytes(budget.weights_dtype, model.num_params);
    // vLLM's budget with the profiled peak replaced by weights + overhead.
    const uint64_t peak = budget.weights_bytes + budget.overhead_bytes;
    const double usable = static_cast<double>(gpu.memory_bytes) * util;
    const double kv_bytes = usable - static_cast<double>(peak);
    if (kv_bytes < static_cast<double>(plan.bytes_per_block)) {
      throw ConfigError(
          fmt::format("{} does not fit on {}: weights {} ({} parameters in {}) + overhead {} = {}, leaving {} of "
                      "{:.0f}% x {} = {} for the KV cache, less than one {} block",
                      model.name, gpu.name, format_byte_size(budget.weights_bytes), format_grouped(model.num_params),
                      dtype_name(budget.weights_dtype), format_byte_size(budget.overhead_bytes), format_byte_size(peak),
                      kv_bytes <= 0 ? "nothing" : format_byte_size(static_cast<uint64_t>(kv_bytes)), util * 100,
                      format_byte_size(gpu.memory_bytes), format_byte_size(static_cast<uint64_t>(usable)),
                      format_byte_size(plan.bytes_per_block)));
    }
    plan.kv_memory_bytes = static_cast<uint64_t>(std::floor(kv_bytes));
    plan.num_blocks = num_gpu_blocks_vllm(gpu.memory_bytes, util, peak, plan.bytes_per_block);
    plan.gpu = budget;
  } else {
    plan.kv_memory_bytes = *options.kv_memory_bytes;
    plan.num_blocks = static_cast<int64_t>(plan.kv_memory_bytes / plan.bytes_per_block);
    if (plan.num_blocks == 0)
      throw ConfigError(fmt::format("a KV budget of {} holds no block of {} ({} at block size {})",
                                    format_byte_size(plan.kv_memory_bytes), format_byte_size(plan.bytes_per_block),
                                    model.name, options.block_size));
  }
  plan.token_capacity = plan.num_blocks * options.block_size;

  plan.context_len =
      options.context_len.value_or(std::min<int64_t>(model.max_position_embeddings, kDefaultContextLenCap));
  plan.blocks_per_request = blocks_per_request(plan.spec, plan.context_len);
  plan.max_concurrency = max_concurrency(plan.num_blocks, plan.spec, plan.context_len);

  plan.swap_space_bytes = options.swap_space_bytes;
  plan.num_cpu_blocks = num_cpu_swap_blocks(options.swap_space_bytes, plan.bytes_per_block);
  return plan;
}

}  // namespace pagedkv
