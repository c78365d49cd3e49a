// Compute-side benchmarks of the paged-attention kernels, one thread, with K/V small enough to
// stay in the L2 cache: they measure the arithmetic and conversion cost per byte of K/V (the
// DRAM-bound view, against the machine's read bandwidth, is `pagedkv bench attention`).
// Rates are per CPU second of the one kernel thread, so they stay meaningful on a busy machine.
//   BM_DecodeInCache/<dtype>/<query heads per KV head>   bytes/s = K/V bytes read per CPU second
//   BM_PrefillWithPrefix/<dtype>                         items/s = attention FLOPs (2 x QK + PV)
//   BM_WriteKV/<dtype>/<KV heads>/<head dim>/<isa>       bytes/s = f32 input bytes converted
//                                                        (int8, fp8: quantized; dtype 0-4 =
//                                                        fp32, fp16, bf16, int8, fp8; isa 0 =
//                                                        auto, 1 = scalar: the int8 key rows'
//                                                        SSE2 reference build)
//   BM_QuantizeInt8Row/<keys>/<n>/<isa>                  items/s = rows (amax / 127, or the keys'
//                                                        format; isa as above)
// and one memory-side benchmark, no arithmetic, for what paging costs the memory system:
//   BM_BlockRead/<KiB per block>/<shuffled>/<prefetch>   bytes/s = bytes read per CPU second
#include <benchmark/benchmark.h>
#include <emmintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pagedkv/kernels/paged_attention.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/storage/block_table.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/storage/kv_ops.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv {
namespace {

constexpr int kKVHeads = 8, kHeadDim = 128, kBlockSize = 16;

DType dtype_arg(int64_t i) {
  constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8, DType::kFP8};
  return kTypes[i];
}

// One request's context in a shuffled paged arena, filled with random values.
struct PagedContext {
  PagedContext(DType dtype, int context, int extra_blocks = 0)
      : arena(spec(dtype), 1, context / kBlockSize + 2 + extra_blocks), kv(arena.layer(0)) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int blocks = (context + kBlockSize - 1) / kBlockSize + extra_blocks;
    table.resize(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 1);
    std::shuffle(table.begin(), table.end(), rng);
    const size_t n = static_cast<size_t>(blocks) * kBlockSize * kKVHeads * kHeadDim;
    std::vector<float> k(n), v(n);
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    std::vector<int64_t> slots(static_cast<size_t>(blocks) * kBlockSize);
    compute_slot_mapping(table.data(), kBlockSize, 0, static_cast<int>(slots.size()), slots.data());
    write_kv(kv, k.data(), v.data(), slots.data(), static_cast<int>(slots.size()));
  }
  static KVCacheSpec spec(DType dtype) {
    KVCacheSpec s;
    s.dtype = dtype;
    s.block_size = kBlockSize;
    s.num_kv_heads = kKVHeads;
    s.head_dim = kHeadDim;
    return s;
  }
  KVArena arena;
  KVLayerView kv;
  std::vector<int32_t> table;
};

AttentionShape shape_for(int group) {
  AttentionShape s;
  s.num_q_heads = kKVHeads * group;
  s.num_kv_heads = kKVHeads;
  s.head_dim = kHeadDim;
  s.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  return s;
}

void BM_DecodeInCache(benchmark::State& state) {
  set_kernel_threads(1);
  const DType dtype = dtype_arg(state.range(0));
  const int group = static_cast<int>(state.range(1));
  const int context = 192;  // 8 heads x 192 tokens x 128 dims x 2 (K, V): 0.75 MiB f32
  PagedContext ctx(dtype, context);
  const AttentionShape shape = shape_for(group);
  const int32_t query_start[] = {0, 1};
  const int32_t context_lens[] = {context};
  PagedAttentionBatch batch{1, query_start, context_lens, ctx.table.data(), static_cast<int>(ctx.table.size())};
  std::vector<float> q(static_cast<size_t>(shape.num_q_heads) * kHeadDim, 0.5f), out(q.size());
  for (auto _ : state) {
    paged_attention(shape, batch, ctx.kv, q.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * context * kKVHeads * kHeadDim * 2 *
                          static_cast<int64_t>(dtype_bytes(dtype, 1)));
  state.SetLabel(std::string(dtype_name(dtype)));
}
BENCHMARK(BM_DecodeInCache)->ArgsProduct({{0, 1, 2, 3, 4}, {1, 4, 8}});

void BM_PrefillWithPrefix(benchmark::State& state) {
  set_kernel_threads(1);
  const DType dtype = dtype_arg(state.range(0));
  const int prefix = 192, chunk = 64, context = prefix + chunk;
  PagedContext ctx(dtype, context);
  const AttentionShape shape = shape_for(4);
  const int32_t query_start[] = {0, chunk};
  const int32_t context_lens[] = {context};
  PagedAttentionBatch batch{1, query_start, context_lens, ctx.table.data(), static_cast<int>(ctx.table.size())};
  std::vector<float> q(static_cast<size_t>(chunk) * shape.num_q_heads * kHeadDim, 0.25f), out(q.size());
  for (auto _ : state) {
    paged_attention(shape, batch, ctx.kv, q.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  // Causal pairs: query i of the chunk sees prefix + i + 1 tokens. 4 FLOPs per pair per dim.
  const double pairs = static_cast<double>(chunk) * prefix + chunk * (chunk + 1) / 2.0;
  state.SetItemsProcessed(
      static_cast<int64_t>(static_cast<double>(state.iterations()) * pairs * shape.num_q_heads * kHeadDim * 4));
  state.SetLabel(std::string(dtype_name(dtype)) + " FLOP/s");
}
BENCHMARK(BM_PrefillWithPrefix)->DenseRange(0, 2);

// Quantize-on-write: 64 tokens of normal(0, 1) rows into one layer of a shape: 8 KV heads x 128
// (a Llama) or 4 x 8 (stories260K, whose int8 keys try 16 steps per row; storage/kv_quantize.h).
// The build an isa argument names: 0 = what the CPU runs by default, 1 = the scalar path (for the
// int8 key rows, the SSE2 reference build every other build matches bit for bit).
KernelIsa isa_arg(int64_t i) { return i == 0 ? KernelIsa::kAuto : KernelIsa::kScalar; }
std::string isa_label(int64_t i) { return i == 0 ? std::string(isa_name(best_available_isa())) : "reference"; }

void BM_WriteKV(benchmark::State& state) {
  const DType dtype = dtype_arg(state.range(0));
  const auto heads = static_cast<int>(state.range(1)), dim = static_cast<int>(state.range(2));
  const KernelIsa isa = isa_arg(state.range(3));
  const int tokens = 64;
  KVCacheSpec spec;
  spec.dtype = dtype;
  spec.block_size = kBlockSize;
  spec.num_kv_heads = heads;
  spec.head_dim = dim;
  KVArena arena(spec, 1, tokens / kBlockSize + 1);
  std::vector<int32_t> table(static_cast<size_t>(tokens / kBlockSize));
  std::iota(table.begin(), table.end(), 1);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(tokens) * static_cast<size_t>(heads * dim)), v(k.size());
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  compute_slot_mapping(table.data(), kBlockSize, 0, tokens, slots.data());
  const KVLayerView kv = arena.layer(0);
  for (auto _ : state) {
    write_kv(kv, k.data(), v.data(), slots.data(), tokens, isa);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(k.size() * 2 * sizeof(float)));
  state.SetLabel(std::string(dtype_name(dtype)) + " " + std::to_string(heads) + "x" + std::to_string(dim) + " " +
                 isa_label(state.range(3)));
}
// int8/fp8: quantize-on-write; int8 also with its key rows' reference build, in the same run.
BENCHMARK(BM_WriteKV)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {8}, {128}, {0}})
    ->ArgsProduct({{1, 3}, {4}, {8}, {0}})
    ->Args({3, 8, 128, 1})
    ->Args({3, 4, 8, 1});

// One int8 row after another (256 rows of normal(0, 1) values, n elements each): amax / 127
// (quantize_row, as values are stored; keys = 0) against the keys' f16 scale and offset, fitted
// (quantize_key_row_int8; keys = 1).
void BM_QuantizeInt8Row(benchmark::State& state) {
  const bool keys = state.range(0) != 0;
  const auto n = static_cast<size_t>(state.range(1));
  const KernelIsa isa = isa_arg(state.range(2));
  const size_t rows = 256;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * n);
  for (auto& v : x) v = normal(rng);
  std::vector<int8_t> codes(rows * n);
  for (auto _ : state) {
    for (size_t r = 0; r < rows; ++r) {
      if (keys) {
        benchmark::DoNotOptimize(quantize_key_row_int8(x.data() + r * n, n, codes.data() + r * n, isa));
      } else {
        benchmark::DoNotOptimize(quantize_row(DType::kInt8, x.data() + r * n, n, codes.data() + r * n, isa));
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(rows));
  state.SetLabel((keys ? "keys: scale + offset, fitted, " : "amax/127, ") + isa_label(state.range(2)));
}
BENCHMARK(BM_QuantizeInt8Row)->ArgsProduct({{0, 1}, {8, 16, 64, 128}, {0, 1}});

// Reads 1 GiB (on transparent huge pages, as the KV arena asks for) as blocks of the given size,
// in address order or shuffled, with SSE2 loads and nothing else: the decode kernel's K/V stream
// with the arithmetic taken out. With prefetch = 1, the next block in reading order is
// prefetched into L2 one line per line read, as the AVX2 kernel's Prefetcher does.
void BM_BlockRead(benchmark::State& state) {
  const size_t block = static_cast<size_t>(state.range(0)) << 10;
  const bool shuffled = state.range(1) != 0, prefetch = state.range(2) != 0;
  const size_t bytes = size_t{1} << 30, huge_page = size_t{2} << 20;
  const std::unique_ptr<char, decltype(&std::free)> buffer(static_cast<char*>(std::aligned_alloc(huge_page, bytes)),
                                                           &std::free);
  (void)madvise(buffer.get(), bytes, MADV_HUGEPAGE);
  std::fill(buffer.get(), buffer.get() + bytes, char{1});
  std::vector<const char*> blocks(bytes / block);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = buffer.get() + i * block;
  std::mt19937_64 rng(3);
  if (shuffled) std::shuffle(blocks.begin(), blocks.end(), rng);
  __m128i sum = _mm_setzero_si128();
  for (auto _ : state) {
    for (size_t b = 0; b < blocks.size(); ++b) {
      const char* p = blocks[b];
      const char* next = prefetch && b + 1 < blocks.size() ? blocks[b + 1] : nullptr;
      for (size_t offset = 0; offset < block; offset += 64) {
        if (next != nullptr) _mm_prefetch(next + offset, _MM_HINT_T1);
        const auto* line = reinterpret_cast<const __m128i*>(p + offset);
        sum = _mm_add_epi32(sum, _mm_add_epi32(_mm_add_epi32(_mm_load_si128(line), _mm_load_si128(line + 1)),
                                               _mm_add_epi32(_mm_load_si128(line + 2), _mm_load_si128(line + 3))));
      }
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_BlockRead)->ArgsProduct({{32, 64, 256}, {0, 1}, {0, 1}})->Iterations(3)->Repetitions(3);

}  // namespace
}  // namespace pagedkv

BENCHMARK_MAIN();
