// Trace replay throughput on the Mooncake conversation trace (../shared/traces; set
// PAGEDKV_SHARED_DIR when running from elsewhere). The in-run baseline is BM_PromptsAndHashes:
// rebuilding every prompt and hashing its blocks, the work replay cannot avoid; the full replay
// adds the manager and pool (lookups, allocation, eviction, caching, freeing) on top.
//   BM_ParseConversation       reading the JSONL (requests/s, bytes/s)
//   BM_PromptsAndHashes/B      baseline at block size B (tokens hashed/s)
//   BM_ReplayCache/B/C         cache-only replay, block size B, C blocks (tokens hashed/s, block ops/s)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "pagedkv/prefix/block_hasher.h"
#include "pagedkv/replay/cache_replay.h"
#include "pagedkv/replay/trace_reader.h"

namespace {

using namespace pagedkv;

std::optional<std::filesystem::path> conversation_path() {
  std::vector<std::filesystem::path> candidates;
  if (const char* s = std::getenv("PAGEDKV_SHARED_DIR")) candidates.emplace_back(s);
  for (const char* c : {"../shared", "../../shared", "../../../shared"}) candidates.emplace_back(c);
  for (const auto& dir : candidates) {
    auto p = dir / "traces" / "mooncake_conversation_trace.jsonl";
    if (std::filesystem::exists(p)) return p;
  }
  return std::nullopt;
}

const Trace* conversation() {
  static std::optional<Trace> trace = []() -> std::optional<Trace> {
    auto p = conversation_path();
    if (!p) return std::nullopt;
    return read_trace(*p);
  }();
  return trace ? &*trace : nullptr;
}

void BM_ParseConversation(benchmark::State& state) {
  const auto path = conversation_path();
  if (!path) return state.SkipWithError("conversation trace not found (set PAGEDKV_SHARED_DIR)");
  size_t requests = 0;
  for (auto _ : state) {
    Trace t = read_trace(*path);
    requests = t.size();
    benchmark::DoNotOptimize(t.requests.data());
  }
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(requests), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(std::filesystem::file_size(*path)));
}
BENCHMARK(BM_ParseConversation)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

void BM_PromptsAndHashes(benchmark::State& state) {
  const Trace* trace = conversation();
  if (!trace) return state.SkipWithError("conversation trace not found (set PAGEDKV_SHARED_DIR)");
  const int block_size = static_cast<int>(state.range(0));
  BlockHasher hasher(block_size);
  std::vector<TokenId> tokens;
  std::vector<BlockHash> hashes;
  std::vector<uint64_t> digests;
  int64_t hashed = 0;
  for (auto _ : state) {
    hashed = 0;
    for (size_t i = 0; i < trace->size(); ++i) {
      tokens.clear();
      hashes.clear();
      digests.clear();
      trace->append_prompt(i, tokens);
      hasher.extend(tokens, PrefixKeys{}, hashes, digests);
      hashed += static_cast<int64_t>(hashes.size()) * block_size;
    }
    benchmark::DoNotOptimize(hashes.data());
  }
  state.counters["tokens_hashed/s"] =
      benchmark::Counter(static_cast<double>(hashed), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PromptsAndHashes)->Arg(16)->Arg(512)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

void BM_ReplayCache(benchmark::State& state) {
  const Trace* trace = conversation();
  if (!trace) return state.SkipWithError("conversation trace not found (set PAGEDKV_SHARED_DIR)");
  CacheReplayConfig c;
  c.block_size = static_cast<int>(state.range(0));
  c.capacity_blocks = state.range(1);
  CacheReplayResult r;
  for (auto _ : state) r = replay_cache(*trace, c);
  state.counters["tokens_hashed/s"] =
      benchmark::Counter(static_cast<double>(r.hashed_tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["block_ops/s"] =
      benchmark::Counter(static_cast<double>(r.block_ops), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["token_hit_rate"] = r.token_hit_rate();
  state.counters["evictions"] = static_cast<double>(r.evictions);
}
BENCHMARK(BM_ReplayCache)
    ->Args({16, 187500})  // 3 M tokens: the paper's per-node cache
    ->Args({16, 625000})  // 10 M tokens
    ->Args({16, 10000000})  // no eviction
    ->Args({512, 5859})  // 3 M tokens at the trace's own block size
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
