#include "engine_options.h"
#include "on_off_flag.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/remote/redis_store.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv::cli {

void EngineOptions::add_to(CLI::App& app) {
  app.add_option("--block-size", block_size, "tokens per KV block")->capture_default_str();
  app.add_option("--num-blocks", num_blocks, "KV pool size in blocks (overrides --kv-cache-bytes)");
  app.add_option("--kv-cache-bytes", kv_cache_bytes, "KV cache budget, e.g. 16MiB")->capture_default_str();
  app.add_option("--swap-space", swap_space, "host swap space for swap preemption (0 disables)")->capture_default_str();
  app.add_option("--kv-dtype", kv_dtype, "KV element type: fp32, fp16, bf16, int8 or fp8 (per token and head scales)")
      ->capture_default_str();
  app.add_option("--preemption", preemption, "recompute, swap or auto")->capture_default_str();
  app.add_option("--kv-reservation", kv_reservation,
                 "paged, or a baseline that reserves each sequence contiguously at admission: max (prompt + "
                 "max_tokens), pow2, oracle (these two need the output length known; otherwise as max)")
      ->capture_default_str();
  app.add_option("--range-allocation", range_allocation,
                 "where a reserving baseline's contiguous ranges go: buddy (power-of-two ranges, the paper's Orca) or "
                 "first-fit")
      ->capture_default_str();
  app.add_flag("--no-prefix-caching", no_prefix_caching, "disable prefix caching");
  app.add_option("--prefix-hash", prefix_hash, "block hash of the prefix cache: xxh3_128 or sha256")
      ->capture_default_str();
  app.add_option("--hash-seed", hash_seed,
                 "seed of the chained block hashes (the same on every instance that shares blocks or a router)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", max_num_seqs, "requests running at once")->capture_default_str();
  app.add_option("--max-num-batched-tokens", max_num_batched_tokens, "tokens per step")->capture_default_str();
  app.add_flag("--check-invariants,--check", check, "run the invariant checker after every step (slow)")
      ->capture_default_str();
  app.add_option("--threads", threads, "kernel threads (default: PAGEDKV_NUM_THREADS or the CPU count)");
  add_on_off_flag(
      app, "--grammar-mask-overlap", "--no-grammar-mask-overlap", grammar_mask_overlap,
      "structured output: fill the next tokens' masks on a worker thread while the forward pass runs "
      "(off: on the engine thread, after it; for tiny models, where the hand-over costs more than it hides)");
  add_on_off_flag(app, "--cascade-attention", "--no-cascade-attention", cascade_attention,
                  "decode requests that share cached prefix blocks (a system prompt) read them once per step "
                  "for the group");
  app.add_option("--host-cache-bytes", host_cache_bytes,
                 "host-memory tier for evicted prefix blocks, e.g. 64MiB (0: none)")
      ->capture_default_str();
  app.add_option("--disk-cache-dir", disk_cache_dir,
                 "directory of the disk (SSD) tier: evicted prefixes, swap overflow, kept across runs");
  app.add_option("--disk-cache-bytes", disk_cache_bytes, "capacity of the disk tier")->capture_default_str();
  app.add_option("--offload-min-hits", offload_min_hits,
                 "offload only evicted blocks with at least this many prefix hits")
      ->capture_default_str();
  app.add_flag("--disk-write-through", disk_write_through,
               "write every computed block to the disk tier at once (default: at eviction and at exit)");
  add_on_off_flag(app, "--lazy-swap-copies", "--eager-swap-copies", lazy_swap_copies,
                  "with tiers, copy a swapped-out block only when the device prefix cache drops it (blocks "
                  "resumed from the device cache are never copied); --eager-swap-copies copies all at once");
  app.add_option("--remote-cache", remote_cache,
                 "shared remote KV tier below disk: redis://[user:password@]host:port[/db] (a server or a "
                 "cluster node), or redis-cluster://host1:port1,host2:port2 (docs/tiers.md)");
  app.add_option("--remote-cache-prefix", remote_cache_prefix, "namespace of the remote tier's keys")
      ->capture_default_str();
  add_on_off_flag(app, "--remote-write-through", "--no-remote-write-through", remote_write_through,
                  "store every computed block in the remote tier at once (else only evicted blocks)");
  app.add_option("--remote-timeout-ms", remote_timeout_ms, "connect and socket timeout of the remote tier")
      ->capture_default_str();
  app.add_option("--remote-min-blocks", remote_min_blocks,
                 "ask the remote tier only when at least this many blocks missed above (the cost rule)")
      ->capture_default_str();
  app.add_flag("--remote-read-replicas", remote_read_replicas,
               "on a Redis Cluster, load and probe from the slots' replicas (READONLY); stores go to masters");
}

void EngineOptions::apply_threads() const {
  if (threads < 0)
    throw ConfigError(fmt::format("--threads must be at least 1 (or 0 for the default), got {}", threads));
  if (threads > 0) set_kernel_threads(threads);
}

EngineConfig EngineOptions::to_config() const {
  EngineConfig c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.grammar_mask_overlap = grammar_mask_overlap;
  c.cascade_attention = cascade_attention;
  c.kv_cache_bytes = parse_byte_size(kv_cache_bytes);
  c.swap_space_bytes = parse_byte_size(swap_space);
  auto dt = parse_dtype(kv_dtype);
  if (!dt || !is_storage_dtype(*dt))
    throw ConfigError(fmt::format("--kv-dtype must be fp32, fp16, bf16, int8 or fp8, got '{}'", kv_dtype));
  c.kv_dtype = *dt;
  if (preemption == "recompute") c.scheduler.preemption_mode = PreemptionMode::kRecompute;
  else if (preemption == "swap") c.scheduler.preemption_mode = PreemptionMode::kSwap;
  else if (preemption == "auto") c.scheduler.preemption_mode = PreemptionMode::kAuto;
  else throw ConfigError(fmt::format("--preemption must be recompute, swap or auto, got '{}'", preemption));
  c.scheduler.kv_reservation = parse_kv_reservation(kv_reservation);
  c.scheduler.range_allocation = parse_range_allocation(range_allocation);
  // The baselines share nothing (the PagedAttention paper's Orca).
  c.enable_prefix_caching = !no_prefix_caching && c.scheduler.kv_reservation == KVReservation::kPaged;
  const auto hash = parse_hash_algorithm(prefix_hash);
  if (!hash) throw ConfigError(fmt::format("--prefix-hash must be xxh3_128 or sha256, got '{}'", prefix_hash));
  c.hash_algorithm = *hash;
  c.hash_seed = hash_seed;
  c.scheduler.max_num_seqs = max_num_seqs;
  c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  c.check_invariants = check;
  c.tiers.host_cache_bytes = parse_byte_size(host_cache_bytes);
  c.tiers.disk_cache_dir = disk_cache_dir;
  c.tiers.disk_cache_bytes = parse_byte_size(disk_cache_bytes);
  c.tiers.offload_min_hits = offload_min_hits;
  c.tiers.write_through = disk_write_through;
  c.tiers.lazy_swap_copies = lazy_swap_copies;
  c.scheduler.lazy_swap_copies = lazy_swap_copies;
  if (!remote_cache.empty())
    remote::use_redis_tier(c.tiers, {remote_cache, remote_cache_prefix, remote_write_through, remote_timeout_ms,
                                     remote_min_blocks, remote_read_replicas});
  return c;
}

std::string default_shared_dir() {
  if (const char* env = std::getenv("PAGEDKV_SHARED_DIR")) return env;
  // <repo>/build/pagedkv -> <repo>/../shared
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto candidate = exe.parent_path().parent_path().parent_path() / "shared";
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "../shared";
}

}  // namespace pagedkv::cli
