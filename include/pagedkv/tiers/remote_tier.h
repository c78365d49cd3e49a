// RemoteTier: KV blocks in a key-value store shared by many engine processes (Redis), below disk.
//
// The store holds the index (which blocks exist) and the eviction (its own maxmemory policy);
// this side keeps no slots, only two lanes, each a worker thread with its own connection:
//   fetch lane: probes (one pipelined EXISTS round trip for a request's next blocks) and loads
//               (pipelined GETs; each value is verified, remote_value_format.h, and its payload
//               scattered straight into the device block the owner allocated for it);
//   store lane: values packed by the transfer engine's memory lane (store(), off the owner
//               thread), sent in batches: one pipelined EXISTS round, then SET of the absent ones.
// Nothing here blocks the owner thread on the network: it submits jobs and collects finished
// ones. Stores are dropped, not queued without bound, when the link is saturated.
//
// Faults: a failed or timed-out call opens a circuit breaker (counted, logged once); while it is
// open probes and loads answer "miss" and stores are dropped without touching the network; the
// next call after the back-off reconnects. A store refusing writes for memory (Redis OOM under
// maxmemory noeviction) pauses stores only, with the same back-off; reads go on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/tiers/circuit_breaker.h"
#include "pagedkv/tiers/remote_store.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

struct RemoteTierOptions {
  RemoteStoreFactory connect;  // one connection per lane
  std::string key_prefix = "pagedkv";  // namespace of the keys
  std::string description;  // the store's address for messages (no password)
  BlockHash fingerprint;  // kv_layout_fingerprint of the running engine
  // Stores beyond this are dropped. Also the most the tier keeps of packed-value buffers for
  // reuse: a burst's buffers stay allocated (and their pages mapped) for the next one.
  size_t max_queued_store_bytes = size_t{64} << 20;
  size_t max_store_batch = 32;  // values per pipelined round (more when the store prefers)
  std::chrono::milliseconds backoff_initial{200};
  std::chrono::milliseconds backoff_max{5000};
  bool log_degraded = true;
};

// Counters of the remote tier; the TierStats fields mean what they do for host and disk
// (lookups: blocks probed; hits: of those, present; dropped: stores not sent).
struct RemoteTierStats : TierStats {
  uint64_t probes = 0;  // probe round trips
  uint64_t vanished = 0;  // blocks present at the probe but gone at the load (a miss)
  uint64_t unavailable_loads = 0;  // blocks not loaded because the link failed (a miss)
  uint64_t store_full_refusals = 0;  // values the store refused for memory
  uint64_t breaker_trips = 0;  // episodes of a failing link
};

enum class RemoteLoadResult : uint8_t { kPending, kOk, kMissing, kCorrupt, kFingerprintMismatch, kUnavailable };

struct RemoteLoad {
  StoredBlockKey expected;  // the value must carry exactly this key
  int32_t device_block = 0;  // where the verified payload goes
  RemoteLoadResult result = RemoteLoadResult::kPending;
};

struct RemoteFetchJob {
  enum class Kind : uint8_t { kProbe, kLoad };
  Kind kind = Kind::kProbe;
  RequestId owner{};
  std::vector<BlockHash> probe;  // kProbe: the blocks asked about
  std::vector<uint8_t> present;  // kProbe result: present[i] = 1 when probe[i] is stored
  std::vector<RemoteLoad> loads;  // kLoad
};

class RemoteTier {
 public:
  using Clock = std::chrono::steady_clock;
  // `device` receives loaded blocks and must outlive this object. Starts the lanes; connects lazily.
  RemoteTier(RemoteTierOptions options, KVArena& device);
  ~RemoteTier();  // stops the lanes: queued fetches finish as misses, queued stores are dropped
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // ---- owner thread ------------------------------------------------------------------------
  void submit(RemoteFetchJob job);
  // Finished fetch jobs, in completion order.
  std::vector<RemoteFetchJob> take_finished();
  int fetches_in_flight() const { return fetches_in_flight_; }
  // Blocks until a fetch job finishes (true) or `deadline` passes (false).
  bool wait_for_fetch(Clock::time_point deadline);
  // Whether a block should be stored now: not already known stored, and the tier takes writes.
  // Marks it known stored when the answer is yes (a failed store unmarks it, see take_finished).
  bool should_store(const BlockHash& hash);
  // The last probe or store showed `hash` stored.
  void note_present(const BlockHash& hash);
  // The link is not known down (breaker closed, or its retry time has come): a probe may go out.
  bool available() const { return breaker_.allow(); }
  // Waits up to `max_wait` for the queued stores to go out (a clean shutdown).
  void flush(std::chrono::milliseconds max_wait);

  // ---- any thread (the transfer engine's memory lane) ---------------------------------------
  // Packs block `block` of `source` with `key` into a value and queues it for the store lane,
  // or drops it (counted) when the queue is full or the tier takes no writes.
  void store(const KVArena& source, int32_t block, const StoredBlockKey& key);

  RemoteTierStats stats() const;
  bool degraded() const;
  std::string degraded_reason() const;
  std::string key_of(const BlockHash& hash) const;
  const RemoteTierOptions& options() const { return options_; }
  std::string describe() const;
  // Owner thread: queue and in-flight accounting agree.
  void check_invariants() const;

 private:
  // A packed value: value_bytes_ bytes, overwritten whole by every pack, so never initialised.
  using ValueBuffer = std::unique_ptr<std::byte[]>;
  struct PendingStore {
    BlockHash hash;
    ValueBuffer value;
  };
  struct Counters {
    std::atomic<uint64_t> lookups{0}, hits{0}, probes{0}, loaded_blocks{0}, loaded_bytes{0}, stored_blocks{0},
        stored_bytes{0}, duplicates{0}, dropped{0}, corrupt{0}, fingerprint_mismatches{0}, io_errors{0}, vanished{0},
        unavailable_loads{0}, full_refusals{0};
  };

  void fetch_lane();
  void store_lane();
  void run_fetch(RemoteStore& conn, RemoteFetchJob& job);
  void run_stores(RemoteStore& conn, std::vector<PendingStore>& batch);
  bool writes_paused(Clock::time_point now) const;
  void link_failed(RemoteStore& conn);
  void link_ok();
  ValueBuffer take_buffer();
  void give_buffers(std::vector<PendingStore>& batch);

  RemoteTierOptions options_;
  KVArena& device_;
  size_t value_bytes_ = 0;
  mutable Counters counters_;
  CircuitBreaker breaker_;

  // Fetch lane.
  mutable std::mutex fetch_m_;
  std::condition_variable fetch_cv_;  // jobs queued
  std::condition_variable finished_cv_;  // a job finished
  std::deque<RemoteFetchJob> fetch_queue_;
  std::vector<RemoteFetchJob> finished_;
  int fetches_in_flight_ = 0;  // owner-side: submitted, not yet taken

  // Store lane.
  mutable std::mutex store_m_;
  std::condition_variable store_cv_;  // values queued (or stop)
  std::condition_variable store_idle_cv_;  // the queue drained
  std::deque<PendingStore> store_queue_;
  size_t queued_bytes_ = 0;
  bool store_busy_ = false;
  std::vector<ValueBuffer> spare_buffers_;  // sent values' buffers, reused by the next packs
  size_t max_spare_buffers_ = 0;
  std::vector<BlockHash> forgotten_;  // stores that failed: no longer known stored
  Clock::time_point writes_paused_until_{};
  std::chrono::milliseconds full_backoff_{0};
  bool full_logged_ = false;

  std::unordered_set<BlockHash> known_stored_;  // owner thread only
  std::atomic<bool> stop_{false};
  std::thread fetch_thread_;
  std::thread store_thread_;
};

}  // namespace pagedkv
