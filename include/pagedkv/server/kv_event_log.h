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
// continues with events. Only the first KV-cache group (the full-attention layers, whose hashes
// a router walks) is indexed.
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

namespace pagedkv::server {

// How an engine hashes prompt blocks: what a router needs to compute the same chained hashes.
struct PrefixHashing {
  int block_size = 16;
  std::string algorithm = "xxh3_128";  // hash_algorithm_name()
  uint64_t seed = 0;
  bool operator==(const PrefixHashing&) const = default;
};

struct KVEventRecord {
  uint64_t seq = 0;
  bool present = true;  // false: the hash is no longer in this medium
  BlockHash hash;
  Medium medium = Medium::kDevice;
};

struct KVEventsPage {
  uint64_t epoch = 0;
  uint64_t last_seq = 0;       // the reader has everything up to here once it applies this page
  bool snapshot = false;       // true: `blocks` replaces the reader's index; `events` is empty
  bool more = false;           // events were cut at max_events: ask again from last_seq
  std::vector<KVEventRecord> events;
  std::vector<std::pair<BlockHash, MediumMask>> blocks;
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
  // Present (hash, medium) pairs now, and records kept (tests and metrics).
  size_t num_present() const;
  size_t num_records() const;

 private:
  struct Copies {
    uint32_t count[3] = {0, 0, 0};  // per Medium
  };
  void record(bool present, const BlockHash& hash, Medium medium);  // mutex_ held

  const size_t capacity_;
  const uint64_t epoch_;
  mutable std::mutex mutex_;
  std::unordered_map<BlockHash, Copies> copies_;
  std::deque<KVEventRecord> records_;  // seq first_seq_ .. last_seq_
  uint64_t last_seq_ = 0;
};

}  // namespace pagedkv::server
