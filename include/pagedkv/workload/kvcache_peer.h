// kvcache-peer-v1: the seeded serving workload that ../shared/workloads/ replays through vLLM v1's
// own Python KVCacheManager and nano-vllm. Generating it exactly and replaying it with the same
// scheduling rules must reproduce vLLM's counters to the unit: that is the proof that our
// manager's semantics are vLLM's. The per-operation timings compare our speed with theirs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/prefix/block_hasher.h"

namespace pagedkv {

// SplitMix64, as the workload README defines it.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    s_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = s_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t uniform_int(uint64_t lo, uint64_t hi) { return lo + next() % (hi - lo + 1); }

 private:
  uint64_t s_;
};

struct PeerWorkload {
  static constexpr uint64_t kSeed = 0x5EED2025;
  static constexpr int kNumRequests = 2000;
  static constexpr int kVocab = 32000;
  static constexpr int kBlockSize = 16;
  static constexpr int kSystemPromptLen = 1024;
  static constexpr int kOutputLen = 128;

  std::vector<TokenId> system_prompt;
  std::vector<std::vector<TokenId>> prompts;

  static PeerWorkload generate();
  static TokenId output_token(int request, int j) {
    return static_cast<TokenId>((static_cast<int64_t>(request) * 7919 + static_cast<int64_t>(j) * 104729 + 1) % kVocab);
  }
  uint64_t total_prompt_tokens() const;
  uint64_t rolling_checksum() const;  // h = h * 1000003 + t + 1 over all prompt tokens
};

struct PeerScenario {
  std::string name;
  int num_blocks = 4096;  // including the reserved null block
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  static PeerScenario by_name(const std::string& name);  // "A" or "B"; throws ConfigError
};

struct PeerCounters {
  uint64_t steps = 0, preemptions = 0, finished = 0;
  uint64_t admissions_ok = 0, admissions_failed = 0;
  uint64_t decode_calls = 0, prefill_chunk_calls = 0;
  uint64_t evictions = 0;
  uint64_t first_admission_hits = 0, first_admission_queries = 0;
  uint64_t lookup_hits = 0, lookup_queries = 0;
  uint64_t peak_running = 0;
  int64_t free_blocks_at_end = 0;
  bool operator==(const PeerCounters&) const = default;
};

// Time spent per operation category, as totals and counts (means are total / count).
struct PeerTimings {
  double admit_ns = 0, decode_ns = 0, free_ns = 0, hash_ns = 0, prefill_chunk_ns = 0;
  uint64_t admit_ops = 0, decode_ops = 0, free_ops = 0, hash_ops = 0, prefill_chunk_ops = 0;
  // The decode calls that opened a block (allocate, evict, hash and cache the filled one): part of
  // decode_ns / decode_ops, split out because they cost what all the others together cost.
  double decode_new_block_ns = 0;
  uint64_t decode_new_block_ops = 0;
  double whole_replay_ns = 0;  // a separate run without per-operation timers, hashing included
  double whole_replay_cpu_ns = 0;  // the same run's thread CPU time (immune to other processes)
};

struct PeerResult {
  PeerCounters counters;
  PeerTimings timings;
};

// Replays the workload under the README's rules: once without timers (the whole-replay time),
// then, with per_operation_timers, once more with a TSC read around every call (the
// per-operation times; their counters must equal the first run's).
PeerResult replay_peer(const PeerWorkload& workload, const PeerScenario& scenario, HashAlgorithm hash,
                       bool check_invariants = false, bool per_operation_timers = true);

// The README's reference counters for scenario A.
PeerCounters peer_reference_counters_a();

}  // namespace pagedkv
