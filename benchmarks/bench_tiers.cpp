// Benchmarks of the KV tiers, each against an in-run baseline:
//   HostTier*      device -> host-tier copies through the transfer engine vs memcpy of the same bytes;
//   DiskTier*      disk-tier writes/reads (pack + checksum + io_uring O_DIRECT, and verify + unpack)
//                  vs raw O_DIRECT sequential pwrite/pread of the same bytes;
//   Swap*/Recompute  one request of N tokens on the engine's KV layout: swap out + in (host tier,
//                  disk tier) vs re-running its prefill;
//   PrefixWorkload  prefix hit rate and time to first token with and without the host and disk
//                  tiers, on a workload whose working set is 4x the device pool.
// Disk benchmarks write under $PAGEDKV_BENCH_DIR (default /tmp).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/random_model.h"
#include "pagedkv/tiers/aligned_buffer.h"
#include "pagedkv/tiers/block_copy.h"
#include "pagedkv/tiers/disk_tier.h"
#include "pagedkv/tiers/tiered_kv_cache.h"
#include "pagedkv/tiers/transfer_engine.h"

namespace pagedkv {
namespace {

// A 7B-class page: 8 KV heads x 128 dims, f16, 16-token blocks: 32 KiB per layer plane; 8 layers
// (a slice of the model) keeps the arenas at a few hundred MiB.
KVCacheSpec big_spec() {
  KVCacheSpec s;
  s.block_size = 16;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.dtype = DType::kF16;
  return s;
}
constexpr int kLayers = 8;
constexpr int kBatchBlocks = 64;  // 64 blocks x 512 KiB = 32 MiB per batch

std::string bench_dir() {
  const char* d = std::getenv("PAGEDKV_BENCH_DIR");
  return (std::filesystem::path(d ? d : "/tmp") / "pagedkv-bench-tiers").string();
}

void fill_random(KVArena& a) {
  std::mt19937_64 rng(7);
  auto* p = static_cast<uint64_t*>(a.data());
  for (size_t i = 0; i < a.bytes() / 8; ++i) p[i] = rng();
}

// ---- host tier ------------------------------------------------------------------------------------

void BM_HostTierCopy(benchmark::State& state) {
  const bool scattered = state.range(0) != 0;
  KVArena device(big_spec(), kLayers, 4 * kBatchBlocks);
  KVArena host(big_spec(), kLayers, 4 * kBatchBlocks);
  fill_random(device);
  TransferEngine engine(device, &host, nullptr);
  std::vector<int32_t> src(kBatchBlocks), dst(kBatchBlocks);
  std::mt19937 rng(1);
  for (int i = 0; i < kBatchBlocks; ++i) {
    src[static_cast<size_t>(i)] = scattered ? 4 * i + 1 : i;
    dst[static_cast<size_t>(i)] = scattered ? 4 * i + 3 : 2 * kBatchBlocks + i;
  }
  if (scattered) std::shuffle(dst.begin(), dst.end(), rng);
  for (auto _ : state) {
    TransferBatch b;
    for (int i = 0; i < kBatchBlocks; ++i)
      b.device_to_host.push_back(
          MemoryCopy{src[static_cast<size_t>(i)], dst[static_cast<size_t>(i)], TransferPurpose::kOffload, {}});
    engine.submit(std::move(b)).wait();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBatchBlocks *
                          static_cast<int64_t>(device.bytes_per_block()));
}
BENCHMARK(BM_HostTierCopy)->ArgName("scattered")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_MemcpyBaseline(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(kBatchBlocks) * KVArena(big_spec(), kLayers, 1).bytes_per_block();
  AlignedBuffer a(bytes, 64), b(bytes, 64);
  std::memset(a.data(), 1, bytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_MemcpyBaseline)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- disk tier ------------------------------------------------------------------------------------

DiskTierOptions bench_disk_options(const std::string& dir) {
  DiskTierOptions o;
  o.dir = dir;
  o.spec = big_spec();
  o.num_layers = kLayers;
  o.fingerprint = BlockHash{0xbe, 0x7c};
  o.capacity_bytes = size_t{1} << 30;
  return o;
}

// Writes (range 0 = 1) or reads back (0) kBatchBlocks adjacent slots through the transfer engine.
void BM_DiskTier(benchmark::State& state) {
  const bool write = state.range(0) != 0;
  std::filesystem::remove_all(bench_dir());
  KVArena device(big_spec(), kLayers, kBatchBlocks);
  fill_random(device);
  DiskTier disk(bench_disk_options(bench_dir()));
  if (!disk.writable()) {
    state.SkipWithError(disk.stats().degraded_reason.c_str());
    return;
  }
  TransferEngine engine(device, nullptr, &disk);
  auto make_writes = [&] {
    TransferBatch b;
    for (int i = 0; i < kBatchBlocks; ++i) {
      DiskWrite w;
      w.source_block = i;
      w.slot = i;
      w.header.key.hash = BlockHash{static_cast<uint64_t>(i), 1};
      w.header.key.tokens.assign(16, i);
      w.header.sequence = disk.next_sequence();
      b.disk_writes.push_back(std::move(w));
    }
    return b;
  };
  engine.submit(make_writes()).wait();
  for (auto _ : state) {
    if (write) {
      engine.submit(make_writes()).wait();
    } else {
      TransferBatch b;
      for (int i = 0; i < kBatchBlocks; ++i) {
        DiskRead r;
        r.slot = i;
        r.device_block = i;
        r.expected.hash = BlockHash{static_cast<uint64_t>(i), 1};
        r.expected.tokens.assign(16, i);
        b.disk_reads.push_back(std::move(r));
      }
      TransferHandle h = engine.submit(std::move(b));
      h.wait();
      if (h.batch().disk_reads.front().result != ReadResult::kOk) state.SkipWithError("read failed verification");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBatchBlocks *
                          static_cast<int64_t>(disk.payload_bytes()));
  state.SetLabel(disk.stats().io_backend);
}
BENCHMARK(BM_DiskTier)->ArgName("write")->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

// Raw O_DIRECT sequential I/O of the same bytes (the slots' size: headers and padding included,
// so the baseline moves at least what the tier moves), in 8 MiB requests as the tier's runs.
void BM_RawODirect(benchmark::State& state) {
  const bool write = state.range(0) != 0;
  const size_t slot = DiskTier(bench_disk_options(bench_dir() + "-probe")).slot_bytes();
  std::filesystem::remove_all(bench_dir() + "-probe");
  const size_t bytes = slot * kBatchBlocks;
  std::filesystem::create_directories(bench_dir());
  const std::string path = bench_dir() + "/raw.bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) {
    state.SkipWithError("cannot open the raw file with O_DIRECT");
    return;
  }
  AlignedBuffer buf(bytes);
  std::memset(buf.data(), 3, bytes);
  constexpr size_t kChunk = size_t{8} << 20;
  auto io = [&](bool w) {
    for (size_t off = 0; off < bytes; off += kChunk) {
      const size_t n = std::min(kChunk, bytes - off);
      const ssize_t got = w ? ::pwrite(fd, buf.data() + off, n, static_cast<off_t>(off))
                            : ::pread(fd, buf.data() + off, n, static_cast<off_t>(off));
      if (got != static_cast<ssize_t>(n)) return false;
    }
    return true;
  };
  io(true);
  for (auto _ : state)
    if (!io(write)) state.SkipWithError("raw I/O failed");
  ::close(fd);
  const size_t payload = KVArena(big_spec(), kLayers, 1).bytes_per_block() * kBatchBlocks;
  // Credited with the payload bytes, like the tier: the ratio is then time against time.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * payload));
}
BENCHMARK(BM_RawODirect)->ArgName("write")->Arg(1)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- swap vs recompute -------------------------------------------------------------------------------

// The built-in random model's shape with a context long enough for 16K tokens.
ModelConfig long_model() {
  ModelConfig c = builtin_random_model_config();
  c.seq_len = 16384 + 64;
  return c;
}

const Model& shared_model() {
  static std::unique_ptr<Model> m = make_random_model(long_model(), 7);
  return *m;
}

std::vector<TokenId> random_prompt(int n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (TokenId& x : t) x = static_cast<TokenId>(3 + rng() % 500);
  return t;
}

// Recompute: the prefill of an N-token prompt (and its first token), as a preempted request
// pays it again on resumption.
void BM_Recompute(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.num_blocks = n / 16 + n / 640 + 16;  // the prompt, plus the 1% admission watermark
  cfg.enable_prefix_caching = false;
  cfg.scheduler.max_num_batched_tokens = 2048;
  LLMEngine engine(shared_model(), cfg);
  for (auto _ : state) {
    GenerationRequest r;
    r.prompt = random_prompt(n, 1);
    r.sampling.temperature = 0;
    r.stop.max_tokens = 1;
    engine.add_request(r);
    engine.run_to_completion();
  }
  state.counters["tokens"] = n;
}

// Swap: device -> tier and back for the N-token request's blocks, on the engine's KV layout.
void swap_round_trip(benchmark::State& state, bool to_disk) {
  const int n = static_cast<int>(state.range(0));
  const ModelConfig mc = long_model();
  KVCacheManagerConfig c;
  c.cache.num_blocks = 2 * (n / 16 + 2);
  c.cache.groups.push_back(KVCacheGroupSpec{mc.kv_cache_spec(16, DType::kF32), mc.n_layers});
  c.max_model_len = n + 16;
  c.enable_caching = false;  // only the swap's own copies are timed
  KVCacheManager manager(std::move(c));
  KVArena device(mc.kv_cache_spec(16, DType::kF32), mc.n_layers, manager.pool().num_blocks());
  fill_random(device);
  TierConfig tc;
  if (to_disk) {
    std::filesystem::remove_all(bench_dir());
    tc.disk_cache_dir = bench_dir();
    tc.disk_cache_bytes = size_t{4} << 30;
  }
  const size_t swap_bytes = to_disk ? 0 : device.bytes_per_block() * static_cast<size_t>(n / 16 + 2);
  TieredKVCache tiers(tc, manager, device, 1, swap_bytes);
  uint64_t id = 1;
  for (auto _ : state) {
    const RequestId rid{id++};
    Request r(rid, random_prompt(n, rid.value));
    manager.allocate_slots(r, n);
    const std::vector<BlockId> blocks(manager.get_block_ids(r).begin(), manager.get_block_ids(r).end());
    if (!tiers.swap_out(r.id, blocks)) state.SkipWithError("no room to swap");
    manager.free(r);
    tiers.before_forward();
    Request back = r;
    manager.allocate_slots(back, n);
    auto st = tiers.start_swap_in(back.id, 0, manager.get_block_ids(back));
    while (st == TieredKVCache::SwapInState::kLoading) {
      tiers.drain();
      st = tiers.poll_swap_in(back.id);
    }
    if (st != TieredKVCache::SwapInState::kDone) state.SkipWithError("swap-in failed");
    manager.free(back);
  }
  state.counters["tokens"] = n;
  state.counters["MiB"] = static_cast<double>(device.bytes_per_block()) * ((n + 15) / 16) / (1 << 20);
}
void BM_SwapHost(benchmark::State& state) { swap_round_trip(state, false); }
void BM_SwapDisk(benchmark::State& state) { swap_round_trip(state, true); }

void swap_args(benchmark::internal::Benchmark* b) {
  for (int n = 64; n <= 16384; n *= 2) b->Arg(n);
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_SwapHost)->Apply(swap_args);
BENCHMARK(BM_SwapDisk)->Apply(swap_args);
BENCHMARK(BM_Recompute)->Apply(swap_args)->Iterations(1);

// ---- prefix workload --------------------------------------------------------------------------------

// 24 shared 512-token documents (a working set of 768 blocks) behind a 192-block device pool;
// 96 requests, each a random document plus a 16-token question, one at a time.
void BM_PrefixWorkload(benchmark::State& state) {
  const int tiers_kind = static_cast<int>(state.range(0));  // 0 none, 1 host, 2 small host + disk
  constexpr int kDocs = 24, kDocTokens = 512, kRequests = 96;
  std::unique_ptr<Model> model = make_random_model(builtin_random_model_config(), 7);
  std::vector<std::vector<TokenId>> docs;
  for (int d = 0; d < kDocs; ++d) docs.push_back(random_prompt(kDocTokens, 100 + static_cast<uint64_t>(d)));
  double hit = 0, prompt = 0, ttft = 0, host = 0, disk = 0;
  for (auto _ : state) {
    std::filesystem::remove_all(bench_dir());
    EngineConfig cfg;
    cfg.block_size = 16;
    cfg.num_blocks = 193;
    const size_t bpb = model->config().kv_cache_spec(16, DType::kF32).bytes_per_block_per_layer() *
                       static_cast<size_t>(model->config().n_layers);
    if (tiers_kind == 1) cfg.tiers.host_cache_bytes = bpb * 1024;
    if (tiers_kind == 2) {
      cfg.tiers.host_cache_bytes = bpb * 128;
      cfg.tiers.disk_cache_dir = bench_dir();
      cfg.tiers.disk_cache_bytes = size_t{256} << 20;
    }
    LLMEngine engine(*model, cfg);
    std::mt19937 rng(3);
    hit = prompt = ttft = host = disk = 0;
    for (int i = 0; i < kRequests; ++i) {
      GenerationRequest r;
      r.prompt = docs[rng() % kDocs];
      const auto q = random_prompt(16, 1000 + static_cast<uint64_t>(i));
      r.prompt.insert(r.prompt.end(), q.begin(), q.end());
      r.sampling.temperature = 0;
      r.stop.max_tokens = 2;
      engine.add_request(r);
      for (const RequestOutput& o : engine.run_to_completion()) {
        hit += o.prefix_hit_tokens;
        prompt += static_cast<double>(o.prompt.size());
        ttft += o.ttft_ms;
        host += o.hit_tokens_by_tier.host;
        disk += o.hit_tokens_by_tier.disk;
      }
    }
  }
  state.counters["hit_rate"] = hit / prompt;
  state.counters["ttft_ms"] = ttft / kRequests;
  state.counters["host_hit_share"] = host / std::max(hit, 1.0);
  state.counters["disk_hit_share"] = disk / std::max(hit, 1.0);
}
BENCHMARK(BM_PrefixWorkload)
    ->ArgName("tiers")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace pagedkv

BENCHMARK_MAIN();
