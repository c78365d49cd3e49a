// Micro-benchmarks of the block-memory core, each beside a naive reference
// allocator doing the same work with std::list + std::unordered_map, so the output carries an
// in-run ratio:
//   - allocate + free of one block                      (target <= 30 ns per block)
//   - touch (+ release) of a cached free block           (a prefix hit)
//   - hashing one 16-token block, XXH3-128 and SHA-256
//   - get_computed_blocks for a 2,048-token prompt, all hits (target <= 5 us) and all misses
//   - one decode step's allocate_slots for 256 running requests (target <= 10 us)
// Run: build/bench_core --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/manager/kv_cache_manager.h"
#include "pagedkv/prefix/block_hasher.h"

namespace pagedkv {
namespace {

constexpr int kBlockSize = 16;

std::vector<TokenId> tokens_from(int n, TokenId first) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (first + i * 7919) % 32000;
  return t;
}

KVCacheManagerConfig manager_config(int num_blocks) {
  KVCacheManagerConfig c;
  c.cache.num_blocks = num_blocks;
  KVCacheGroupSpec g;
  g.spec.block_size = kBlockSize;
  c.cache.groups.push_back(g);
  c.max_model_len = 16384;
  return c;
}

// ---- the naive reference: what a straightforward implementation does ----------------------------
// A std::list free list (with an iterator per block, so touching is O(1) as in vLLM's Python
// doubly-linked queue), an std::unordered_map from block hash to block, per-request tables in an
// std::unordered_map of std::vectors, and the same chained BlockHash values as keys.
class NaiveManager {
 public:
  explicit NaiveManager(int num_blocks)
      : ref_(static_cast<size_t>(num_blocks), 0),
        hash_(static_cast<size_t>(num_blocks)),
        cached_(static_cast<size_t>(num_blocks), false),
        where_(static_cast<size_t>(num_blocks)) {
    for (int b = 1; b < num_blocks; ++b) where_[static_cast<size_t>(b)] = free_.insert(free_.end(), b);
  }

  int allocate_one() {
    const int b = free_.front();
    free_.pop_front();
    if (cached_[static_cast<size_t>(b)]) {  // evict
      cache_.erase(hash_[static_cast<size_t>(b)]);
      cached_[static_cast<size_t>(b)] = false;
    }
    ref_[static_cast<size_t>(b)] = 1;
    return b;
  }
  void release(int b) {
    if (--ref_[static_cast<size_t>(b)] == 0) where_[static_cast<size_t>(b)] = free_.insert(free_.end(), b);
  }
  void touch(int b) {
    if (ref_[static_cast<size_t>(b)]++ == 0) free_.erase(where_[static_cast<size_t>(b)]);
  }
  void cache(int b, const BlockHash& h) {
    if (cached_[static_cast<size_t>(b)] || cache_.contains(h)) return;
    cache_.emplace(h, b);
    hash_[static_cast<size_t>(b)] = h;
    cached_[static_cast<size_t>(b)] = true;
  }
  // The longest cached prefix, at most num_tokens - 1 tokens.
  std::vector<int> lookup(const std::vector<BlockHash>& hashes, int num_tokens) const {
    std::vector<int> hits;
    const size_t max_blocks = std::min(hashes.size(), static_cast<size_t>((num_tokens - 1) / kBlockSize));
    for (size_t i = 0; i < max_blocks; ++i) {
      auto it = cache_.find(hashes[i]);
      if (it == cache_.end()) break;
      hits.push_back(it->second);
    }
    return hits;
  }
  // vLLM's allocate_slots for a running request (no prefix hits): grow the table, cache full blocks.
  bool allocate_slots(uint64_t id, int num_tokens_after, const std::vector<BlockHash>& hashes) {
    std::vector<int>& table = tables_[id];
    const int need = (num_tokens_after + kBlockSize - 1) / kBlockSize - static_cast<int>(table.size());
    if (need > static_cast<int>(free_.size())) return false;
    for (int i = 0; i < need; ++i) table.push_back(allocate_one());
    const size_t full = std::min(hashes.size(), static_cast<size_t>(num_tokens_after / kBlockSize));
    for (size_t i = num_cached_[id]; i < full; ++i) cache(table[i], hashes[i]);
    num_cached_[id] = std::max(num_cached_[id], full);
    return true;
  }
  void free_request(uint64_t id) {
    auto it = tables_.find(id);
    for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) release(*b);
    tables_.erase(it);
    num_cached_.erase(id);
  }

 private:
  std::list<int> free_;
  std::vector<int> ref_;
  std::vector<BlockHash> hash_;
  std::vector<bool> cached_;
  std::vector<std::list<int>::iterator> where_;
  std::unordered_map<BlockHash, int> cache_;
  std::unordered_map<uint64_t, std::vector<int>> tables_;
  std::unordered_map<uint64_t, size_t> num_cached_;
};

// ---- allocate + free of one block ----------------------------------------------------------------

void BM_PoolAllocateFree(benchmark::State& state) {
  BlockPoolOptions o;
  o.num_blocks = 4096;
  o.block_size = kBlockSize;
  BlockPool pool(std::move(o));
  std::vector<BlockId> out;
  out.reserve(1);
  for (auto _ : state) {
    out.clear();
    pool.allocate(1, out);
    pool.free_blocks(out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PoolAllocateFree);

// Allocate and free 16 blocks per call: the per-block cost when a request takes several.
void BM_PoolAllocateFree16(benchmark::State& state) {
  BlockPoolOptions o;
  o.num_blocks = 4096;
  o.block_size = kBlockSize;
  BlockPool pool(std::move(o));
  std::vector<BlockId> out;
  out.reserve(16);
  for (auto _ : state) {
    out.clear();
    pool.allocate(16, out);
    pool.free_blocks(out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * 16);
}
BENCHMARK(BM_PoolAllocateFree16);

void BM_NaiveAllocateFree(benchmark::State& state) {
  NaiveManager naive(4096);
  for (auto _ : state) {
    const int b = naive.allocate_one();
    naive.release(b);
    benchmark::DoNotOptimize(b);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NaiveAllocateFree);

// ---- touch of a cached block ------------------------------------------------------------------

// A prefix hit on a cached free block: touch takes it out of the free queue, and releasing it
// puts it back (a hit that is later freed), so every iteration repeats the same work.
void BM_PoolTouchCachedBlock(benchmark::State& state) {
  BlockPoolOptions o;
  o.num_blocks = 4096;
  o.block_size = kBlockSize;
  BlockPool pool(std::move(o));
  std::vector<BlockId> b;
  pool.allocate(1, b);
  const auto tokens = tokens_from(kBlockSize, 1);
  BlockContentKey key;
  key.hash = BlockHash{0x1234, 0x5678};
  key.tokens = tokens;
  key.parent_block = kNoLink;
  pool.cache_block(b[0], key);
  pool.free_blocks(b);
  for (auto _ : state) {
    pool.touch(b);
    pool.free_blocks(b);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PoolTouchCachedBlock);

void BM_NaiveTouchCachedBlock(benchmark::State& state) {
  NaiveManager naive(4096);
  const int b = naive.allocate_one();
  naive.cache(b, BlockHash{0x1234, 0x5678});
  naive.release(b);
  for (auto _ : state) {
    naive.touch(b);
    naive.release(b);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_NaiveTouchCachedBlock);

// ---- hashing one block ----------------------------------------------------------------------------

void BM_HashBlock(benchmark::State& state, HashAlgorithm algorithm) {
  BlockHasher hasher(kBlockSize, algorithm, 0);
  const auto tokens = tokens_from(kBlockSize, 3);
  BlockHash parent = hasher.root();
  for (auto _ : state) {
    parent = hasher.hash_block(parent, tokens, {});
    benchmark::DoNotOptimize(parent);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(16 + kBlockSize * sizeof(TokenId)));
}
BENCHMARK_CAPTURE(BM_HashBlock, xxh3_128, HashAlgorithm::kXxh3_128);
BENCHMARK_CAPTURE(BM_HashBlock, sha256, HashAlgorithm::kSha256);

// ---- get_computed_blocks for a 2,048-token prompt ---------------------------------------------------

// A manager holding a cached 2,048-token prompt, and a second request with the same prompt
// (all hits) or another one (all misses), hashed once up front as vLLM hashes at request creation.
struct LookupFixture {
  KVCacheManager manager{manager_config(4096)};
  Request cached{RequestId{1}, tokens_from(2048, 11)};
  Request probe;
  ComputedBlocks out;
  explicit LookupFixture(bool hits) : probe(RequestId{2}, hits ? tokens_from(2048, 11) : tokens_from(2048, 5)) {
    manager.allocate_slots(cached, cached.num_tokens());
    manager.hash_request(probe);
  }
};

void BM_LookupPrompt2048(benchmark::State& state, bool hits) {
  LookupFixture f(hits);
  for (auto _ : state) {
    f.manager.get_computed_blocks(f.probe, f.out);
    benchmark::DoNotOptimize(f.out.num_computed_tokens);
  }
  if (f.out.num_computed_tokens != (hits ? 2032 : 0)) state.SkipWithError("unexpected hit length");
  state.counters["hit_blocks"] = static_cast<double>(f.out.blocks[0].size());
}
BENCHMARK_CAPTURE(BM_LookupPrompt2048, all_hits, true);
BENCHMARK_CAPTURE(BM_LookupPrompt2048, all_misses, false);

// The same lookup on the naive reference (unordered_map per block, result vector per call).
void BM_NaiveLookupPrompt2048(benchmark::State& state, bool hits) {
  NaiveManager naive(4096);
  Request cached(RequestId{1}, tokens_from(2048, 11));
  Request probe(RequestId{2}, hits ? tokens_from(2048, 11) : tokens_from(2048, 5));
  BlockHasher hasher(kBlockSize);
  hasher.extend(cached.tokens, PrefixKeys{}, cached.block_hashes, cached.block_extra_digests);
  hasher.extend(probe.tokens, PrefixKeys{}, probe.block_hashes, probe.block_extra_digests);
  naive.allocate_slots(1, cached.num_tokens(), cached.block_hashes);
  size_t found = 0;
  for (auto _ : state) {
    auto h = naive.lookup(probe.block_hashes, probe.num_tokens());
    found = h.size();
    benchmark::DoNotOptimize(h.data());
  }
  if (found != (hits ? 127u : 0u)) state.SkipWithError("unexpected hit length");
}
BENCHMARK_CAPTURE(BM_NaiveLookupPrompt2048, all_hits, true);
BENCHMARK_CAPTURE(BM_NaiveLookupPrompt2048, all_misses, false);

// ---- one decode step for 256 running requests ------------------------------------------------------

// Each iteration is one scheduler step: every running request gets its next token and
// allocate_slots(request, 1); one in 16 crosses into a new block and caches the full one. Every
// 64 steps the batch is replaced by fresh requests (outside the timing) so tables stay bounded.
constexpr int kRunning = 256;
constexpr int kPromptTokens = 200;
constexpr int kStepsPerBatch = 64;

void BM_DecodeStep256(benchmark::State& state) {
  const int num_blocks = kRunning * ((kPromptTokens + kStepsPerBatch) / kBlockSize + 2) + 1;
  KVCacheManager manager(manager_config(num_blocks));
  std::vector<Request> running;
  uint64_t next_id = 1;
  auto admit_batch = [&] {
    for (Request& r : running) manager.free(r);
    running.clear();
    for (int i = 0; i < kRunning; ++i) {
      const uint64_t id = next_id++;
      Request r(RequestId{id}, tokens_from(kPromptTokens, static_cast<TokenId>(id * 131)));
      r.tokens.reserve(kPromptTokens + kStepsPerBatch);
      r.block_hashes.reserve(32);
      r.block_extra_digests.reserve(32);
      if (!manager.allocate_slots(r, r.num_tokens())) state.SkipWithError("admission failed");
      r.num_computed_tokens = r.num_tokens();
      running.push_back(std::move(r));
    }
  };
  admit_batch();
  int step = 0;
  for (auto _ : state) {
    if (step == kStepsPerBatch) {
      state.PauseTiming();
      admit_batch();
      step = 0;
      state.ResumeTiming();
    }
    for (Request& r : running) {
      r.append_token(step);
      if (!manager.allocate_slots(r, 1)) state.SkipWithError("decode allocation failed");
      r.num_computed_tokens += 1;
    }
    ++step;
  }
  state.SetItemsProcessed(state.iterations() * kRunning);
}
BENCHMARK(BM_DecodeStep256);

void BM_NaiveDecodeStep256(benchmark::State& state) {
  const int num_blocks = kRunning * ((kPromptTokens + kStepsPerBatch) / kBlockSize + 2) + 1;
  NaiveManager naive(num_blocks);
  BlockHasher hasher(kBlockSize);
  std::vector<Request> running;
  uint64_t next_id = 1;
  auto admit_batch = [&] {
    for (Request& r : running) naive.free_request(r.id.value);
    running.clear();
    for (int i = 0; i < kRunning; ++i) {
      const uint64_t id = next_id++;
      Request r(RequestId{id}, tokens_from(kPromptTokens, static_cast<TokenId>(id * 131)));
      hasher.extend(r.tokens, PrefixKeys{}, r.block_hashes, r.block_extra_digests);
      if (!naive.allocate_slots(r.id.value, r.num_tokens(), r.block_hashes)) state.SkipWithError("admission failed");
      running.push_back(std::move(r));
    }
  };
  admit_batch();
  int step = 0;
  for (auto _ : state) {
    if (step == kStepsPerBatch) {
      state.PauseTiming();
      admit_batch();
      step = 0;
      state.ResumeTiming();
    }
    for (Request& r : running) {
      r.append_token(step);
      // The same hashing work as the manager does when a block fills.
      hasher.extend(r.tokens, PrefixKeys{}, r.block_hashes, r.block_extra_digests);
      if (!naive.allocate_slots(r.id.value, r.num_tokens(), r.block_hashes)) state.SkipWithError("decode failed");
    }
    ++step;
  }
  state.SetItemsProcessed(state.iterations() * kRunning);
}
BENCHMARK(BM_NaiveDecodeStep256);

}  // namespace
}  // namespace pagedkv

BENCHMARK_MAIN();
