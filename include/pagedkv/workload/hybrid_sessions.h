// A multi-session, round-robin chat workload (the shape of vllm-project/vllm#48435, where Gemma
// prefix reuse fell to 0 % at a quarter of pool occupancy) replayed through the KV-cache manager:
// session s's turn t prompt is its whole conversation so far (every earlier prompt and reply)
// plus a new user message, and sessions take turns, so a session's prefix must survive every
// other session's turn to be hit. Run with a hybrid model's groups and with its
// full-attention-only twin (the same groups, every one full attention), it measures whether
// sliding-window groups cost prefix hits.
#pragma once

#include <cstdint>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/manager/kv_cache_manager.h"

namespace pagedkv {

struct HybridSessionsConfig {
  int sessions = 16;
  int turns = 6;
  int system_prompt_tokens = 256;  // shared by every session
  int user_tokens = 96;  // a new user message per turn
  int output_tokens = 64;  // reply tokens decoded per turn
  int concurrency = 4;  // requests running at once (decode steps interleave)
  int num_blocks = 0;  // pool size, null block included
  bool retention = true;  // KVCacheManagerConfig::sliding_window_retention
  int checkpoint_interval = 0;  // KVCacheManagerConfig::sliding_window_checkpoint_interval
  int max_num_batched_tokens = 0;  // prefill chunk (0: a prompt's uncached rest in one step)
  uint64_t seed = 1;
  bool check_invariants = false;  // run the manager's checker after every step (tests)

  void validate() const;  // ConfigError naming the field
};

struct HybridSessionsResult {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t hit_tokens = 0;
  int peak_blocks_in_use = 0;
  // Distinct blocks every session's final conversation takes when all of it is kept in every
  // group (the full-attention twin's working set; the shared system prompt counted once).
  int64_t full_working_set_blocks = 0;
  PrefixCacheStats stats;
  BlockPoolStats pool;
};

// Replays the workload with `groups` (the model's KV-cache groups, each at its block size). Throws
// ConfigError when the pool cannot hold `concurrency` requests at their largest.
HybridSessionsResult run_hybrid_sessions(const HybridSessionsConfig& config,
                                         const std::vector<KVCacheGroupSpec>& groups);

// The full-attention-only twin of a model's groups: the same groups, every one full attention.
std::vector<KVCacheGroupSpec> full_attention_twin(std::vector<KVCacheGroupSpec> groups);

}  // namespace pagedkv
