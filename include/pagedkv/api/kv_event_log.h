// KVEventLog: one engine's KV events, numbered, for the routers that index it (GET /kv_events).
//
// The engine reports every block stored in or removed from the device pool and the host and disk
// tiers. A router wants less: which block hashes this instance can serve, and from which medium.
// So the log keeps, per (hash, medium), how many copies exist (a pool may cache the same content
// twice) and records only the transitions that change what a router sees: "now present" and
// "now absent". Each record has a sequence number; a reader asks for everything after the last
// number it applied. The log keeps the newest `capacity` records; a reader that fell further
// behind, or that names another epoch (the number drawn when the log starts: a restarted
// instance has a new one), gets a snapshot of every present (hash, medium) instead, and then
// continues with events. Every KV-cache group is indexed, a record naming its group (hybrid
// models: the sliding-window groups cache other blocks than the full-attention ones); a router
// walks one of them, PrefixHashing::routing_group.
//
// Thread-safe: the engine thread appends, HTTP threads read; one mutex, never held across I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagedkv/block/kv_events.h"
#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv::api {

// One KV-cache group as the events name it.
struct KVGroupInfo {
  AttentionKind kind = AttentionKind::kFull;
  int sliding_window = 0;  // tokens; 0 unless kind is kSlidingWindow
  int block_size = 16;  // tokens; a multiple of PrefixHashing::block_size
  bool operator==(const KVGroupInfo&) const = default;
};

// How an engine hashes prompt blocks: what a router needs to compute the same chained hashes.
// Hashes are chained per block of `block_size` tokens; a group whose blocks are k times larger
// names its block by the hash of the block's last k-th (so a router takes every k-th hash).
struct PrefixHashing {
  int block_size = 16;
  std::string algorithm = "xxh3_128";  // hash_algorithm_name()
  uint64_t seed = 0;
  // The engine's groups (empty: one full-attention group of block_size, the older wire), and
  // the one a router indexes: the first full-attention group, whose cached blocks are a prefix
  // chain a lookup walks from the start (a sliding group keeps only windows).
  std::vector<KVGroupInfo> groups;
  int routing_group = 0;
  // Tokens a block of the routing group holds.
  int routing_block_size() const {
    return routing_group >= 0 && static_cast<size_t>(routing_group) < groups.size()
               ? groups[static_cast<size_t>(routing_group)].block_size
               : block_size;
  }
  bool operator==(const PrefixHashing&) const = default;
};

// The hashing of an engine whose manager has these groups (routing_group as above; group 0 when
// none is full attention).
PrefixHashing prefix_hashing_for(const KVCacheConfig& cache, std::string algorithm, uint64_t seed);

struct KVEventRecord {
  uint64_t seq = 0;
  bool present = true;  // false: the hash is no longer in this medium
  BlockHash hash;
  Medium medium = Medium::kDevice;
  uint16_t group = 0;  // the KV-cache group whose block it is
};

// A snapshot entry: a hash present in these media, in one group.
struct KVSnapshotBlock {
  BlockHash hash;
  MediumMask media = 0;
  uint16_t group = 0;
  bool operator==(const KVSnapshotBlock&) const = default;
};

struct KVEventsPage {
  uint64_t epoch = 0;
  uint64_t last_seq = 0;  // the reader has everything up to here once it applies this page
  bool snapshot = false;  // true: `blocks` replaces the reader's index; `events` is empty
  bool more = false;  // events were cut at max_events: ask again from last_seq
  std::vector<KVEventRecord> events;
  std::vector<KVSnapshotBlock> blocks;
};

class KVEventLog {
 public:
  // `epoch`: 0 draws a random one.
  explicit KVEventLog(size_t capacity = 1u << 16, uint64_t epoch = 0);

  uint64_t epoch() const { return epoch_; }
  // Appends the engine's events (in order).
  void append(std::span<const KVEvent> events);
  // What a reader that applied everything up to `since` of `epoch` needs next (see above).
  KVEventsPage read(uint64_t epoch, uint64_t since, size_t max_events) const;
  // Present (hash, group, medium) triples now, and records kept (tests and metrics).
  size_t num_present() const;
  size_t num_records() const;

 private:
  struct Copies {
    uint32_t count[3] = {0, 0, 0};  // per Medium
  };
  // Copies are kept per (hash, group): the same content cached by two groups is two entries.
  struct HashInGroup {
    BlockHash hash;
    uint16_t group = 0;
    bool operator==(const HashInGroup&) const = default;
  };
  struct HashInGroupHasher {
    size_t operator()(const HashInGroup& k) const {
      return std::hash<BlockHash>{}(k.hash) ^ (static_cast<size_t>(k.group) * 0x9E3779B97F4A7C15ull);
    }
  };
  void record(bool present, const HashInGroup& key, Medium medium);  // mutex_ held

  const size_t capacity_;
  const uint64_t epoch_;
  mutable std::mutex mutex_;
  std::unordered_map<HashInGroup, Copies, HashInGroupHasher> copies_;
  std::deque<KVEventRecord> records_;  // seq first_seq_ .. last_seq_
  uint64_t last_seq_ = 0;
};

}  // namespace pagedkv::api
