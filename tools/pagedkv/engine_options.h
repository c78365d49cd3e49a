// Command-line options shared by the commands that run the engine (generate, demo, serve).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "pagedkv/engine/llm_engine.h"

namespace pagedkv::cli {

struct EngineOptions {
  int block_size = 16;
  int num_blocks = 0;
  std::string kv_cache_bytes = "16MiB";
  std::string swap_space = "4MiB";
  std::string kv_dtype = "fp32";
  std::string preemption = "auto";
  std::string kv_reservation = "paged";
  std::string range_allocation = "buddy";
  bool no_prefix_caching = false;
  std::string prefix_hash = "xxh3_128";
  uint64_t hash_seed = 0;
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  bool check = false;
  bool grammar_mask_overlap = true;
  bool cascade_attention = true;  // shared prefix blocks read once per step for the requests sharing them  //
                                  // structured output's masks filled while the forward pass runs
  int threads = 0;  // kernel threads; 0: PAGEDKV_NUM_THREADS or the CPU count
  // KV tiers (off unless one of the first two is set).
  std::string host_cache_bytes = "0";
  std::string disk_cache_dir;
  std::string disk_cache_bytes = "1GiB";
  unsigned offload_min_hits = 0;
  bool disk_write_through = false;
  bool lazy_swap_copies = true;
  // Remote tier (a Redis server or cluster shared by many processes; off unless --remote-cache is set).
  std::string remote_cache;
  std::string remote_cache_prefix = "pagedkv";
  bool remote_write_through = true;
  int remote_timeout_ms = 200;
  int remote_min_blocks = 1;
  bool remote_read_replicas = false;

  void add_to(CLI::App& app);
  EngineConfig to_config() const;  // throws ConfigError
  // Sets the process-wide kernel thread count when --threads was given.
  void apply_threads() const;
};

// The shared model directory (../shared/models relative to the binary's repo, or $PAGEDKV_SHARED_DIR).
std::string default_shared_dir();

}  // namespace pagedkv::cli
