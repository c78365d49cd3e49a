// KVIndex: the router's picture of which block hashes each backend can serve, and from which
// medium (device pool, host tier, disk tier), kept from the backends' KV events.
//
// A request's prefix hit on a backend is the run of its chained block hashes, from the first,
// that the backend holds in some medium: the engine looks a prefix up block by block and stops at
// the first miss, so a block held after a gap is worth nothing. Not thread-safe (BackendPool
// guards it).
#pragma once

#include <cstddef>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pagedkv/block/kv_events.h"
#include "pagedkv/core/block_hash.h"

namespace pagedkv::router {

// The leading blocks of a request one backend holds, by the best medium each is found in.
struct PrefixOverlap {
  int device = 0;
  int host = 0;
  int disk = 0;
  int blocks() const { return device + host + disk; }
  bool operator==(const PrefixOverlap&) const = default;
};

class KVIndex {
 public:
  explicit KVIndex(int num_backends);

  int num_backends() const { return static_cast<int>(backends_.size()); }
  // One more backend, knowing nothing yet: its index is the old num_backends().
  void add_backend() { backends_.emplace_back(); }
  // A snapshot replaces what the index knew of `backend`.
  void replace(int backend, std::span<const std::pair<BlockHash, MediumMask>> blocks);
  // One event: `hash` became present in (or absent from) `medium` on `backend`.
  void apply(int backend, const BlockHash& hash, Medium medium, bool present);
  // Forgets everything of `backend` (it is down: its blocks are gone or unreachable).
  void clear(int backend);

  // The leading run of `hashes` that `backend` holds.
  PrefixOverlap overlap(int backend, std::span<const BlockHash> hashes) const;
  // Hashes `backend` holds in `medium`.
  size_t size(int backend, Medium medium) const;
  MediumMask find(int backend, const BlockHash& hash) const;

 private:
  struct Backend {
    std::unordered_map<BlockHash, MediumMask> blocks;
    size_t per_medium[kNumMedia] = {0, 0, 0};
  };
  Backend& at(int backend);
  const Backend& at(int backend) const;

  std::vector<Backend> backends_;
};

}  // namespace pagedkv::router
