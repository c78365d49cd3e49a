// KV-cache memory math: the reference texts' figures, vLLM's and nano-vllm's block-count
// formulas, swap blocks, per-request blocks and concurrency, and whole plans.
#include <gtest/gtest.h>

#include "pagedkv/core/error.h"
#include "pagedkv/memory/gpu_spec.h"
#include "pagedkv/memory/kv_memory.h"
#include "pagedkv/memory/memory_plan.h"
#include "pagedkv/memory/model_shape.h"

namespace pagedkv {
namespace {

KVCacheSpec fp16_spec(std::string_view model, int block_size = 16) {
  return model_preset(model).kv_cache_spec(block_size, DType::kF16);
}

size_t bytes_per_block(std::string_view model) {
  return kv_bytes_per_block(fp16_spec(model), model_preset(model).num_layers);
}

// ---- the figures of the reference texts --------------------------------------------------------

TEST(KVMemoryReference, Llama2_70B) {
  KVCacheSpec spec = fp16_spec("llama-2-70b");
  EXPECT_EQ(spec.bytes_per_block_per_layer(), 65'536u);
  EXPECT_EQ(kv_bytes_per_block(spec, 80), 5'242'880u);
  EXPECT_EQ(kv_bytes_per_token(spec, 80), 327'680u);
  // The reference rounds the block to 5.24 MB and gets 8,206; the exact block gives 8,201.
  EXPECT_EQ(num_blocks_in_budget(43e9, 5'242'880), 8'201);
}

TEST(KVMemoryReference, OtherModels) {
  EXPECT_EQ(bytes_per_block("llama-2-7b"), 8'388'608u);
  EXPECT_EQ(bytes_per_block("llama-2-13b"), 13'107'200u);
  EXPECT_EQ(bytes_per_block("mixtral-8x7b"), 2'097'152u);
  EXPECT_EQ(bytes_per_block("llama-3.1-405b"), 8'257'536u);
  EXPECT_EQ(kv_bytes_per_token(fp16_spec("llama-3-8b"), 32), 131'072u);
  // Per block per layer, as the reference's table lists it.
  EXPECT_EQ(fp16_spec("llama-2-7b").bytes_per_block_per_layer(), 262'144u);
  EXPECT_EQ(fp16_spec("llama-2-13b").bytes_per_block_per_layer(), 327'680u);
}

TEST(KVMemoryReference, VLLMv0Example) {
  // 002's example: block_size 4, 4 layers, 8 heads, head size 128, fp16. Its own formula,
  // 4 x 4 x (2 x 8 x 128) x 2, and vLLM's get_cache_block_size give 65,536 bytes; the text's
  // "4 x 4 x 8 x 128 x 2 = 32,768" drops the factor 2 for K and V.
  KVCacheSpec spec{.kind = AttentionKind::kFull,
                   .block_size = 4,
                   .num_kv_heads = 8,
                   .head_dim = 128,
                   .dtype = DType::kF16,
                   .sliding_window = 0};
  EXPECT_EQ(kv_bytes_per_block(spec, 4), 65'536u);
}

TEST(KVMemoryReference, Stories260K) {
  // models/README.md: fp32, 1,280 bytes per token over 5 layers; 512 tokens are 640 KiB.
  KVCacheSpec spec = model_preset("stories260k").kv_cache_spec(16, DType::kF32);
  EXPECT_EQ(kv_bytes_per_token(spec, 5), 1'280u);
  EXPECT_EQ(kv_bytes_per_token(spec, 5) * 512, 640u * 1024u);
}

TEST(KVMemory, DtypesScaleTheBytes) {
  const ModelShape& m = model_preset("llama-3-8b");
  EXPECT_EQ(kv_bytes_per_token(m.kv_cache_spec(16, DType::kF32), 32), 262'144u);
  EXPECT_EQ(kv_bytes_per_token(m.kv_cache_spec(16, DType::kBF16), 32), 131'072u);
  // fp8 and int8 add one f32 scale per (token, KV head) for K and V: 2 x 8 heads x 4 B x 32 layers.
  EXPECT_EQ(kv_bytes_per_token(m.kv_cache_spec(16, DType::kFP8), 32), 65'536u + 2'048u);
  EXPECT_EQ(kv_bytes_per_token(m.kv_cache_spec(16, DType::kInt8), 32), 65'536u + 2'048u);
  EXPECT_EQ(kv_bytes_per_token(m.kv_cache_spec(16, DType::kInt4), 32), 32'768u);
}

TEST(KVMemory, RejectsBadArguments) {
  KVCacheSpec spec = fp16_spec("llama-2-7b");
  EXPECT_THROW(kv_bytes_per_block(spec, 0), ConfigError);
  EXPECT_THROW(num_blocks_in_budget(1e9, 0), ConfigError);
  EXPECT_THROW(num_gpu_blocks_vllm(80'000'000'000, 0.0, 0, 1), ConfigError);
  EXPECT_THROW(num_gpu_blocks_vllm(80'000'000'000, 1.01, 0, 1), ConfigError);
  EXPECT_THROW(blocks_per_request(spec, 0), ConfigError);
}

// ---- block counts from a budget --------------------------------------------------------------

TEST(KVMemoryBudget, VLLMFormula) {
  // floor((total x util - peak) / block), values checked against the same expression in Python.
  constexpr uint64_t kH100 = 81'559ull << 20;
  EXPECT_EQ(num_gpu_blocks_vllm(kH100, 0.9, 40'000'000'000, 5'242'880), 7'051);
  EXPECT_EQ(num_gpu_blocks_vllm(80ull << 30, 0.9, 20'000'000'000, 5'242'880), 10'930);
  // Exactly one block's worth, and one byte short of it.
  EXPECT_EQ(num_gpu_blocks_vllm(2000, 1.0, 1000, 1000), 1);
  EXPECT_EQ(num_gpu_blocks_vllm(1999, 1.0, 1000, 1000), 0);
  // A peak above the budget gives 0 blocks, as vLLM's max(num_gpu_blocks, 0).
  EXPECT_EQ(num_gpu_blocks_vllm(80ull << 30, 0.9, 80ull << 30, 5'242'880), 0);
}

TEST(KVMemoryBudget, NanoVLLMFormula) {
  // floor((total x util - used - peak + current) / block).
  EXPECT_EQ(num_gpu_blocks_nano_vllm(80ull << 30, 0.9, 20'000'000'000, 18'000'000'000, 16'000'000'000, 5'242'880),
            10'549);
  // With no transient activations (peak == current) it is vLLM's formula with peak = used.
  for (uint64_t used : {1'000'000'000ull, 30'000'000'000ull, 70'000'000'000ull}) {
    EXPECT_EQ(num_gpu_blocks_nano_vllm(80ull << 30, 0.9, used, 5'000'000'000, 5'000'000'000, 5'242'880),
              num_gpu_blocks_vllm(80ull << 30, 0.9, used, 5'242'880));
  }
  EXPECT_EQ(num_gpu_blocks_nano_vllm(1ull << 30, 0.9, 1ull << 30, 0, 0, 4096), 0);
}

TEST(KVMemoryBudget, CpuSwapBlocks) {
  EXPECT_EQ(num_cpu_swap_blocks(4ull << 30, 5'242'880), 819);  // vLLM's default 4 GiB, Llama-2-70B
  EXPECT_EQ(num_cpu_swap_blocks(0, 5'242'880), 0);
  EXPECT_EQ(num_cpu_swap_blocks(5'242'880, 5'242'880), 1);
}

// ---- per-request blocks and concurrency --------------------------------------------------------

TEST(KVMemoryConcurrency, FullAttention) {
  KVCacheSpec spec = fp16_spec("llama-2-70b");
  EXPECT_EQ(blocks_per_request(spec, 1), 1);
  EXPECT_EQ(blocks_per_request(spec, 16), 1);
  EXPECT_EQ(blocks_per_request(spec, 17), 2);
  EXPECT_EQ(blocks_per_request(spec, 4096), 256);
  EXPECT_DOUBLE_EQ(max_concurrency(8'201, spec, 4096), 8'201.0 / 256.0);
}

TEST(KVMemoryConcurrency, SlidingWindowHoldsOnlyTheWindow) {
  KVCacheSpec spec = model_preset("mistral-7b-v0.1").kv_cache_spec(16, DType::kBF16);
  ASSERT_EQ(spec.kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(blocks_per_request(spec, 1000), 63);  // shorter than the window: every block
  EXPECT_EQ(blocks_per_request(spec, 32768), 257);  // ceil(4095 / 16) + 1
  // The bound is tight: a window of block_size tokens starting mid-block spans two blocks.
  KVCacheSpec small{.kind = AttentionKind::kSlidingWindow,
                    .block_size = 4,
                    .num_kv_heads = 1,
                    .head_dim = 1,
                    .dtype = DType::kF16,
                    .sliding_window = 4};
  EXPECT_EQ(blocks_per_request(small, 100), 2);
  small.sliding_window = 1;
  EXPECT_EQ(blocks_per_request(small, 100), 1);
}

// ---- whole plans --------------------------------------------------------------------------------

TEST(MemoryPlan, FromAKVBudget) {
  PlanOptions options;
  options.kv_dtype = DType::kF16;
  options.kv_memory_bytes = 43'000'000'000;
  options.swap_space_bytes = 4ull << 30;
  MemoryPlan plan = plan_memory(model_preset("llama-2-70b"), options);
  EXPECT_EQ(plan.bytes_per_token, 327'680u);
  EXPECT_EQ(plan.bytes_per_block_per_layer, 65'536u);
  EXPECT_EQ(plan.bytes_per_block, 5'242'880u);
  EXPECT_EQ(plan.num_blocks, 8'201);
  EXPECT_EQ(plan.token_capacity, 8'201 * 16);
  EXPECT_EQ(plan.context_len, 4096);  // the model's max_position_embeddings
  EXPECT_EQ(plan.blocks_per_request, 256);
  EXPECT_DOUBLE_EQ(plan.max_concurrency, 8'201.0 / 256.0);
  EXPECT_EQ(plan.num_cpu_blocks, 819);
  EXPECT_FALSE(plan.gpu.has_value());
}

TEST(MemoryPlan, FromAGpu) {
  PlanOptions options;
  options.gpu = gpu_preset("h100-80gb");
  options.weights_dtype = DType::kInt4;
  MemoryPlan plan = plan_memory(model_preset("llama-2-70b"), options);
  ASSERT_TRUE(plan.gpu.has_value());
  EXPECT_EQ(plan.gpu->weights_bytes, 68'976'648'192u / 2);
  EXPECT_EQ(plan.gpu->overhead_bytes, kDefaultOverheadBytes);
  // floor(81,559 MiB x 0.9 - weights - 2 GiB) = 40,332,921,241 bytes: 7,692 blocks.
  EXPECT_EQ(plan.kv_memory_bytes, 40'332'921'241u);
  EXPECT_EQ(plan.num_blocks, 7'692);
  EXPECT_EQ(plan.spec.dtype, DType::kF16);  // the model's dtype
}

TEST(MemoryPlan, DefaultsComeFromTheModel) {
  PlanOptions options;
  options.gpu = gpu_preset("h100-80gb");
  MemoryPlan plan = plan_memory(model_preset("llama-3-8b"), options);
  EXPECT_EQ(plan.spec.dtype, DType::kBF16);
  EXPECT_EQ(plan.gpu->weights_dtype, DType::kBF16);
  EXPECT_EQ(plan.gpu->weights_bytes, 2 * 8'030'261'248u);
  EXPECT_EQ(plan.num_blocks, 28'019);  // checked against the same expression in Python
  EXPECT_EQ(plan.context_len, 8192);
  // The default context length is capped.
  plan = plan_memory(model_preset("qwen2.5-7b"), options);
  EXPECT_EQ(plan.context_len, kDefaultContextLenCap);
  options.context_len = 1000;
  EXPECT_EQ(plan_memory(model_preset("qwen2.5-7b"), options).blocks_per_request, 63);
}

TEST(MemoryPlan, ModelTooLargeForTheGpu) {
  PlanOptions options;
  options.gpu = gpu_preset("h100-80gb");
  try {
    plan_memory(model_preset("llama-3.1-405b"), options);
    FAIL() << "405B parameters in bf16 cannot fit on one H100";
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("does not fit on h100-80gb"), std::string::npos) << message;
    EXPECT_NE(message.find("405,853,388,800 parameters in bf16"), std::string::npos) << message;
  }
}

TEST(MemoryPlan, RejectsInconsistentOptions) {
  const ModelShape& model = model_preset("llama-2-7b");
  PlanOptions neither;
  EXPECT_THROW(plan_memory(model, neither), ConfigError);
  PlanOptions both;
  both.kv_memory_bytes = 1ull << 30;
  both.gpu = gpu_preset("a100-80gb");
  EXPECT_THROW(plan_memory(model, both), ConfigError);
  PlanOptions tiny;
  tiny.kv_memory_bytes = 1000;  // less than one block
  EXPECT_THROW(plan_memory(model, tiny), ConfigError);
  PlanOptions bad_util;
  bad_util.gpu = gpu_preset("a100-80gb");
  bad_util.gpu_memory_utilization = 1.5;
  EXPECT_THROW(plan_memory(model, bad_util), ConfigError);
  PlanOptions bad_block;
  bad_block.kv_memory_bytes = 1ull << 30;
  bad_block.block_size = 0;
  EXPECT_THROW(plan_memory(model, bad_block), ConfigError);
}

TEST(GpuPresets, MemoryAsNvidiaSmiReportsIt) {
  EXPECT_EQ(gpu_preset("h100-80gb").memory_bytes, 81'559ull << 20);
  EXPECT_EQ(gpu_preset("H200-141GB").memory_bytes, 143'771ull << 20);
  EXPECT_EQ(gpu_preset("a100-40gb").memory_bytes, 40'960ull << 20);
  EXPECT_EQ(gpu_preset("a100-80gb").memory_bytes, 81'920ull << 20);
  EXPECT_EQ(gpu_preset("l4-24gb").memory_bytes, 23'034ull << 20);
  try {
    gpu_preset("v100");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("h100-80gb"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagedkv
