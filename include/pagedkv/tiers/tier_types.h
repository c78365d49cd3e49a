// Vocabulary shared by the KV tiers: which tier a block lives in, an owned copy of a block's
// content key (what a lower tier stores beside the bytes so that a lookup confirms all of it),
// hit accounting per request and counters per tier.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"

namespace pagedkv {

// The memory hierarchy, fastest first. kDevice is the primary arena the kernels read (host memory
// standing in for GPU memory today); kRemote is a store shared by many processes (Redis).
enum class TierKind : uint8_t { kDevice, kHost, kDisk, kRemote };
std::string_view tier_kind_name(TierKind t);

// Prefix-hit tokens of one request, by the tier its hit blocks were found in.
struct TierHitTokens {
  int device = 0;
  int host = 0;
  int disk = 0;
  int remote = 0;
  int total() const { return device + host + disk + remote; }
  bool operator==(const TierHitTokens&) const = default;
};

// An owned BlockContentKey.
struct StoredBlockKey {
  BlockHash hash;
  BlockHash parent;
  uint64_t extra_digest = 0;
  uint16_t group = 0;
  std::vector<TokenId> tokens;

  static StoredBlockKey from(const BlockContentKey& key);
  BlockContentKey view() const;  // valid while this object lives
  bool matches(const BlockContentKey& key) const;
};

// Counters of one lower tier. Blocks, not tokens, unless the name says bytes.
struct TierStats {
  uint64_t lookups = 0;  // blocks looked up (promotion)
  uint64_t hits = 0;  // blocks found and confirmed
  uint64_t stored_blocks = 0;  // blocks written into the tier (offload, demotion, flush)
  uint64_t stored_bytes = 0;
  uint64_t loaded_blocks = 0;  // blocks read out of the tier into the device arena
  uint64_t loaded_bytes = 0;
  uint64_t duplicates = 0;  // stores skipped: the tier already held the block
  uint64_t evictions = 0;  // cached blocks dropped from the tier to make room
  uint64_t demotions = 0;  // of those, written down to the next tier first
  uint64_t dropped = 0;  // stores refused: every slot pinned or in flight, or tier degraded
  uint64_t swapped_out_blocks = 0;  // swap preemption
  uint64_t swap_copies_deferred = 0;  // of those, cached on the device: copied only if dropped there
  uint64_t swap_copies_skipped = 0;  // deferred copies never made (the device cache still held them)
  uint64_t swapped_in_blocks = 0;
  uint64_t corrupt_blocks = 0;  // failed verification (checksum, short read, key): a miss, reclaimed
  uint64_t io_errors = 0;  // failed reads or writes
  uint64_t fingerprint_mismatches = 0;  // slots written for another model or layout: never used
  uint64_t rebuilt_blocks = 0;  // blocks found in the slot headers at start-up
  bool degraded = false;  // the tier stopped taking writes (or entirely) after an error
  std::string degraded_reason;
  std::string io_backend;  // disk tier: "io_uring+O_DIRECT", "io_uring", "pread+O_DIRECT", "pread"
};

// What every tier answers: a confirmed lookup, its size, its counters and its checker.
class KVTier {
 public:
  virtual ~KVTier() = default;
  virtual TierKind kind() const = 0;
  virtual int capacity_blocks() const = 0;
  virtual int num_cached_blocks() const = 0;
  // The slot (device: the block id) holding exactly `key`'s content, or nullopt.
  virtual std::optional<int32_t> find(const BlockContentKey& key) const = 0;
  virtual const TierStats& stats() const = 0;
  // Throws InvariantError describing the first violation.
  virtual void check_invariants() const = 0;
};

}  // namespace pagedkv
