// The remote KV tier on a Redis server (benchmarks/remote_tier.sh starts one of its own):
//   store/load throughput at a model's block size, raw (RedisStore: pipelined SET/GET of
//   ready-made values) and through the tier (RemoteTier: pack + checksum + EXISTS + SET; GET +
//   verify + scatter into the device arena), with hiredis' read buffer kept or freed;
//   the time to load N blocks of a prefix (probe + load) against the time to prefill them.
// Prints one JSON object; medians and minima over --rounds.
//   bench_remote_tier --url redis://127.0.0.1:PORT/0 [--model stories260K.bin] [--blocks 256]
// With --url redis-cluster://h:p,... the tier runs on a Redis Cluster (RedisClusterStore), and
// only the tier's figures are measured (--tier-only).
#include <fmt/format.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pagedkv/core/percentile.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/random_model.h"
#include "pagedkv/remote/redis_cluster_store.h"
#include "pagedkv/remote/redis_store.h"
#include "pagedkv/tiers/block_copy.h"
#include "pagedkv/tiers/remote_tier.h"
#include "pagedkv/tiers/remote_value_format.h"

namespace pagedkv {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// This process' CPU time, all threads (the tier's lanes and the caller), in seconds.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The calling thread's CPU time, in seconds.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// This process' minor page faults so far (first touches of fresh memory).
double minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt);
}

struct Series {
  std::vector<double> s;
  double median() const {
    auto v = s;
    std::sort(v.begin(), v.end());
    return percentile_of_sorted(v, 50);
  }
  double min() const { return s.empty() ? 0 : *std::min_element(s.begin(), s.end()); }
};

nlohmann::json rate(const Series& seconds, int blocks, size_t value_bytes) {
  const double med = seconds.median(), best = seconds.min();
  return {{"median_s", med},
          {"min_s", best},
          {"blocks_per_s_median", blocks / med},
          {"gb_per_s_median", blocks * static_cast<double>(value_bytes) / med / 1e9},
          {"blocks_per_s_best", blocks / best}};
}

// Raw pipelined SET then GET of `blocks` values of `bytes`, `batch` keys per round trip.
// One warmed-up connection for all rounds (a fresh one pays a warm-up that long-lived lanes do not).
nlohmann::json raw_store(RemoteStore& s, size_t bytes, int blocks, int batch, int rounds, const std::string& tag = "") {
  std::vector<std::byte> value(bytes, std::byte{7});
  Series set_s, get_s;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> keys;
    for (int i = 0; i < blocks; ++i) keys.push_back(fmt::format("bench:{}{}:{}:{}", tag, bytes, round, i));
    auto t0 = Clock::now();
    for (int i = 0; i < blocks; i += batch) {
      const int n = std::min(batch, blocks - i);
      std::vector<std::span<const std::byte>> values(static_cast<size_t>(n), std::span<const std::byte>(value));
      std::vector<uint8_t> stored;
      if (s.set(std::span(keys).subspan(static_cast<size_t>(i), static_cast<size_t>(n)), values, stored) !=
          RemoteStatus::kOk)
        throw std::runtime_error("SET failed: " + s.last_error());
    }
    set_s.s.push_back(seconds_since(t0));
    size_t got = 0;
    t0 = Clock::now();
    for (int i = 0; i < blocks; i += batch) {
      const int n = std::min(batch, blocks - i);
      s.get(std::span(keys).subspan(static_cast<size_t>(i), static_cast<size_t>(n)),
            [&](size_t, std::span<const std::byte> v) { got += v.size(); });
    }
    get_s.s.push_back(seconds_since(t0));
    if (got != bytes * static_cast<size_t>(blocks)) throw std::runtime_error("GET lost values");
  }
  return {{"set", rate(set_s, blocks, bytes)}, {"get", rate(get_s, blocks, bytes)}};
}

// Raw SET batches written out in 64 KiB pieces (RedisStoreOptions::write_chunk_bytes) against
// whole batches queued in hiredis' buffer, alternating round by round: per-round SET times and
// the median of the per-round ratios (chunked / whole; below 1 means chunking is faster).
nlohmann::json chunked_writes_ab(const remote::RedisStoreOptions& o, size_t bytes, int blocks, int batch, int rounds) {
  auto whole_options = o;
  whole_options.write_chunk_bytes = 0;
  remote::RedisStore chunked(o), whole(whole_options);
  raw_store(chunked, bytes, blocks, batch, 1, "warmup-chunked:");  // connections warmed, not timed
  raw_store(whole, bytes, blocks, batch, 1, "warmup-whole:");
  Series chunked_s, whole_s, ratio;
  for (int round = 0; round < rounds; ++round) {
    const bool chunked_first = round % 2 == 0;  // alternate which goes first
    double t_chunked = 0, t_whole = 0;
    for (int k = 0; k < 2; ++k) {
      const bool is_chunked = (k == 0) == chunked_first;
      // New keys every time (as the tier writes): neither side overwrites what the other stored.
      const nlohmann::json r = raw_store(is_chunked ? chunked : whole, bytes, blocks, batch, 1,
                                         fmt::format("{}{}:", is_chunked ? "chunked" : "whole", round));
      (is_chunked ? t_chunked : t_whole) = r["set"]["median_s"].get<double>();
    }
    chunked_s.s.push_back(t_chunked);
    whole_s.s.push_back(t_whole);
    ratio.s.push_back(t_chunked / t_whole);
  }
  return {{"set_chunked", rate(chunked_s, blocks, bytes)},
          {"set_whole_batch", rate(whole_s, blocks, bytes)},
          {"chunked_over_whole_median", ratio.median()}};
}

// Through the tier: `blocks` blocks of `arena` stored (pack + EXISTS + SET), then loaded (probe
// + GET + verify + scatter) into another arena.
nlohmann::json tier_round_trip(const RemoteStoreFactory& connect, const KVCacheSpec& spec, int layers, int blocks,
                               int rounds) {
  KVArena src(spec, layers, blocks), dst(spec, layers, blocks);
  std::memset(src.data(), 3, src.bytes());
  Series store_s, pack_s, probe_s, load_s, store_cpu, load_cpu, store_faults, load_faults, pack_cpu;
  // One tier (its lanes keep their connections, as in a server) for every round; round 0 warms
  // them up and is not counted; each round stores blocks of new hashes, so new keys.
  RemoteTierOptions to;
  to.connect = connect;
  // New keys in every process too (benchmarks/remote_tier.sh runs this several times against one Redis).
  to.fingerprint = BlockHash{std::random_device{}(), static_cast<uint64_t>(Clock::now().time_since_epoch().count())};
  to.log_degraded = false;
  to.max_queued_store_bytes = size_t{1} << 32;
  RemoteTier tier(to, dst);
  for (int round = 0; round <= rounds; ++round) {
    std::vector<StoredBlockKey> keys(static_cast<size_t>(blocks));
    for (int i = 0; i < blocks; ++i) {
      keys[static_cast<size_t>(i)].hash = BlockHash{static_cast<uint64_t>(i) + 1, 99 + static_cast<uint64_t>(round)};
      keys[static_cast<size_t>(i)].tokens.assign(static_cast<size_t>(spec.block_size), i);
    }
    const uint64_t settled_before = tier.stats().stored_blocks + tier.stats().dropped;
    double cpu0 = process_cpu_seconds();
    double faults0 = minor_faults();
    const double pack_cpu0 = thread_cpu_seconds();
    auto t0 = Clock::now();
    for (int i = 0; i < blocks; ++i) tier.store(src, i, keys[static_cast<size_t>(i)]);
    const double pack_seconds = seconds_since(t0);  // the caller's part: every block packed and queued
    const double pack_cpu_seconds = thread_cpu_seconds() - pack_cpu0;  // the same, on this thread's clock
    // Waits on the store lane's own signal: polling the counters woke this thread every 50 us,
    // taking the CPU from the lane and the servers it measures.
    tier.flush(std::chrono::seconds(60));
    const double store_seconds = seconds_since(t0);
    const double store_cpu_seconds = process_cpu_seconds() - cpu0;
    const double store_fault_count = minor_faults() - faults0;
    if (tier.stats().stored_blocks + tier.stats().dropped < settled_before + static_cast<uint64_t>(blocks))
      throw std::runtime_error("the stores did not settle within a minute");
    if (tier.stats().dropped)
      throw std::runtime_error(
          fmt::format("{} stores dropped ({})", tier.stats().dropped, tier.stats().degraded_reason));
    auto run = [&](RemoteFetchJob job) {
      tier.submit(std::move(job));
      while (true) {
        auto done = tier.take_finished();
        if (!done.empty()) return std::move(done.front());
        tier.wait_for_fetch(Clock::now() + std::chrono::milliseconds(5));
      }
    };
    RemoteFetchJob probe;
    probe.kind = RemoteFetchJob::Kind::kProbe;
    for (const auto& k : keys) probe.probe.push_back(k.hash);
    t0 = Clock::now();
    RemoteFetchJob answered = run(std::move(probe));
    const double probe_seconds = seconds_since(t0);
    RemoteFetchJob load;
    load.kind = RemoteFetchJob::Kind::kLoad;
    for (int i = 0; i < blocks; ++i) load.loads.push_back(RemoteLoad{keys[static_cast<size_t>(i)], i});
    cpu0 = process_cpu_seconds();
    faults0 = minor_faults();
    t0 = Clock::now();
    RemoteFetchJob loaded = run(std::move(load));
    const double load_seconds = seconds_since(t0);
    const double load_cpu_seconds = process_cpu_seconds() - cpu0;
    const double load_fault_count = minor_faults() - faults0;
    for (const RemoteLoad& l : loaded.loads)
      if (l.result != RemoteLoadResult::kOk) throw std::runtime_error("a load failed");
    if (round == 0) continue;  // the warm-up
    store_s.s.push_back(store_seconds);
    pack_s.s.push_back(pack_seconds);
    probe_s.s.push_back(probe_seconds);
    load_s.s.push_back(load_seconds);
    store_cpu.s.push_back(store_cpu_seconds);
    load_cpu.s.push_back(load_cpu_seconds);
    pack_cpu.s.push_back(pack_cpu_seconds);
    store_faults.s.push_back(store_fault_count);
    load_faults.s.push_back(load_fault_count);
  }
  const size_t value = remote_value_bytes(spec.block_size, block_payload_bytes(src));
  return {{"value_bytes", value},
          {"store", rate(store_s, blocks, value)},
          {"probe", rate(probe_s, blocks, value)},
          {"load", rate(load_s, blocks, value)},
          {"probe_plus_load_median_s", probe_s.median() + load_s.median()},
          {"store_pack_median_s", pack_s.median()},
          // The caller's CPU per block packed (its thread's clock: what other threads and
          // processes take from it does not count).
          {"store_pack_cpu_us_per_block_median", pack_cpu.median() / blocks * 1e6},
          // The client's CPU (this process, all threads) per block: what competes with the servers.
          {"store_cpu_us_per_block_median", store_cpu.median() / blocks * 1e6},
          {"load_cpu_us_per_block_median", load_cpu.median() / blocks * 1e6},
          // Minor page faults per block: the KV arenas are touched when built (KVArena), so
          // these are the tier's own fresh buffers (and the stores' reply and read buffers).
          {"store_faults_per_block_median", store_faults.median() / blocks},
          {"load_faults_per_block_median", load_faults.median() / blocks}};
}

// Prefill of `blocks` x block_size tokens on `model` (no cache hits): seconds to the first token.
Series prefill_seconds(const Model& model, int blocks, int block_size, int rounds) {
  Series out;
  for (int round = 0; round < rounds; ++round) {
    EngineConfig cfg;
    cfg.block_size = block_size;
    cfg.kv_cache_bytes = size_t{256} << 20;
    cfg.max_model_len = blocks * block_size + 8;
    cfg.scheduler.max_num_batched_tokens = blocks * block_size + 8;
    LLMEngine engine(model, cfg);
    GenerationRequest g;
    for (int t = 0; t < blocks * block_size; ++t)
      g.prompt.push_back(static_cast<TokenId>(1 + (t * 7919 + round) % (model.config().vocab_size - 1)));
    g.sampling.temperature = 0;
    g.stop.max_tokens = 1;
    engine.add_request(g);
    const auto t0 = Clock::now();
    engine.run_to_completion();
    out.s.push_back(seconds_since(t0));
  }
  return out;
}

}  // namespace
}  // namespace pagedkv

int main(int argc, char** argv) {
  using namespace pagedkv;
  std::string url, model_path;
  int blocks = 256, rounds = 5, batch = 32;
  bool random_model = true, tier_only = false, raw_cluster = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--url") url = argv[i + 1];
    else if (a == "--model") model_path = argv[i + 1];
    else if (a == "--blocks") blocks = std::atoi(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else if (a == "--random-model") random_model = std::atoi(argv[i + 1]) != 0;
    else if (a == "--tier-only") tier_only = std::atoi(argv[i + 1]) != 0;
    else if (a == "--raw-cluster") raw_cluster = std::atoi(argv[i + 1]) != 0;
  }
  if (url.empty()) {
    fmt::print(stderr,
               "usage: bench_remote_tier --url redis://127.0.0.1:PORT/0|redis-cluster://H:P,... [--model M.bin] "
               "[--blocks N] [--rounds N] "
               "[--batch N] [--random-model 0|1] [--tier-only 0|1] [--raw-cluster 0|1]\n");
    return 2;
  }
  const bool cluster = url.starts_with(remote::kRedisClusterScheme);
  remote::RedisStoreOptions o;
  RemoteStoreFactory connect;
  if (cluster) {
    remote::RedisClusterStoreOptions c;
    c.seeds = remote::parse_redis_cluster_url(url);
    c.io_timeout = c.connect_timeout = std::chrono::milliseconds(5000);
    connect = remote::redis_cluster_store_factory(c);
    tier_only = true;  // the raw figures below are a single server's
  } else {
    o.url = remote::parse_redis_url(url);
    o.io_timeout = o.connect_timeout = std::chrono::milliseconds(5000);
    connect = remote::redis_store_factory(o);
  }
  nlohmann::json out;
  out["blocks"] = blocks;
  out["rounds"] = rounds;
  out["pipeline"] = batch;
  // Models: stories260K (the served checkpoint) when given, and a 7B-class layer layout.
  std::vector<std::pair<std::string, std::unique_ptr<Model>>> models;
  if (!model_path.empty()) models.emplace_back("stories260K", std::make_unique<Llama2cCheckpoint>(model_path));
  ModelConfig big = builtin_random_model_config();
  big.dim = 1024;
  big.hidden_dim = 2816;
  big.n_layers = 8;
  big.n_heads = 16;
  big.n_kv_heads = 8;
  big.seq_len = 8192;
  if (random_model) models.emplace_back("random-1024x8", make_random_model(big, 1));
  for (auto& [name, model] : models) {
    const ModelConfig& mc = model->config();
    KVCacheSpec spec;
    spec.block_size = 16;
    spec.num_kv_heads = mc.n_kv_heads;
    spec.head_dim = mc.head_dim();
    spec.dtype = DType::kF32;
    nlohmann::json m;
    // Throughput on `blocks` blocks of this layout; the prefill of as many as the model's context holds.
    m["tier"] = tier_round_trip(connect, spec, mc.n_layers, blocks, rounds);
    if (cluster && raw_cluster) {  // the store alone, without the tier's packing and checks
      std::unique_ptr<RemoteStore> store = connect();
      const size_t value = m["tier"]["value_bytes"].get<size_t>();
      raw_store(*store, value, blocks, batch, 1, "warmup:");
      m["raw_cluster_store"] = raw_store(*store, value, blocks, batch, rounds, "raw:");
    }
    if (tier_only) {  // the like-for-like rounds of remote_tier.sh: nothing else between them
      out["models"][name] = m;
      continue;
    }
    const size_t value = m["tier"]["value_bytes"].get<size_t>();
    auto kept = o;
    kept.keep_read_buffer = true;
    remote::RedisStore kept_store(kept);
    raw_store(kept_store, value, blocks, batch, 1, "warmup:");
    m["raw_keep_read_buffer"] = raw_store(kept_store, value, blocks, batch, rounds, "kept:");
    auto freed = o;
    freed.keep_read_buffer = false;
    remote::RedisStore freed_store(freed);
    raw_store(freed_store, value, blocks, batch, 1, "warmup:");
    m["raw_hiredis_default_buffer"] = raw_store(freed_store, value, blocks, batch, rounds, "default:");
    if (value <= (64u << 10))  // the small values where the tier is slow; large ones would fill Redis
      m["raw_set_chunked_vs_whole_batch"] = chunked_writes_ab(o, value, blocks, batch, std::max(rounds, 7));
    const int n = std::min(blocks, (mc.seq_len - 8) / 16);
    const Series prefill = prefill_seconds(*model, n, 16, rounds);
    m["prefill_blocks"] = n;
    m["prefill_median_s"] = prefill.median();
    m["prefill_min_s"] = prefill.min();
    // Loading those n blocks: one probe round trip plus n blocks at the tier's load rate.
    const double load_n =
        m["tier"]["probe"]["median_s"].get<double>() + n * m["tier"]["load"]["median_s"].get<double>() / blocks;
    m["remote_load_n_blocks_s"] = load_n;
    m["remote_over_prefill"] = load_n / prefill.median();
    out["models"][name] = m;
  }
  fmt::print("{}\n", out.dump(2));
  return 0;
}
