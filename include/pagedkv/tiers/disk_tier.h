// The SSD tier: fixed-size slots in one file per fingerprint under a cache directory
// (`<dir>/pagedkv-<fingerprint>.kvslots`), a capacity limit in bytes, LRU eviction, and an index
// rebuilt from the slot headers when a process starts (disk_slot_format.h), so a restarted
// process with the same model and layout finds the blocks an earlier one left.
//
// I/O goes through io_uring with O_DIRECT and 4096-aligned buffers where the kernel and the
// filesystem allow, else falls back to io_uring on the page cache, then to pread/pwrite; the
// choice is in stats().io_backend. Trouble never throws out of the tier, and the engine keeps
// serving with the tiers it has: a directory that cannot be created or a file that cannot be
// opened or locked disables the tier (logged once to stderr, counted in stats); a failed write
// (disk full, read-only) pauses writes only, behind a circuit breaker: they are retried after a
// back-off that doubles while they keep failing, and the first success resumes them (both logged
// once), so freeing space brings the tier back. A block that fails verification (header, key,
// payload checksum, short read) is a miss, counted and reclaimed: its header is zeroed so no later
// process trusts it either.
//
// Threads: metadata (the slot index, stats) belongs to the owner thread; execute() is called
// from one I/O thread at a time (the transfer engine's disk lane).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/tiers/circuit_breaker.h"
#include "pagedkv/tiers/disk_slot_format.h"
#include "pagedkv/tiers/slot_index.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

// One positioned read or write of whole slots (buffer aligned to kDiskAlignment).
struct DiskIoRequest {
  bool write = false;
  uint64_t offset = 0;
  std::byte* buffer = nullptr;
  size_t bytes = 0;
  int64_t result = 0;  // bytes transferred, or -errno
};

struct DiskTierOptions {
  std::string dir;  // created if absent
  size_t capacity_bytes = size_t{1} << 30;
  BlockHash fingerprint;  // kv_layout_fingerprint of the running model and layout
  KVCacheSpec spec;  // the device arena's spec and layer count (payload size)
  int num_layers = 1;
  bool use_io_uring = true;
  bool use_o_direct = true;
  int queue_depth = 32;
  bool log_degraded = true;  // print the one-line "degraded" notice to stderr
  // How long to wait for the file lock: a process that just died may hold it for a moment
  // (the kernel releases an io_uring's files asynchronously).
  int lock_wait_ms = 2000;
  // After a failed write, writes pause this long, doubling up to the maximum while they fail.
  std::chrono::milliseconds write_retry_initial{1000};
  std::chrono::milliseconds write_retry_max{30000};
  // Tests: called on the I/O thread before each request; a non-zero errno fails it unperformed.
  std::function<int(const DiskIoRequest&)> fault_injection;
};

class DiskTier final : public KVTier {
 public:
  explicit DiskTier(DiskTierOptions options);
  ~DiskTier() override;
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The file is open and its index usable (reads are served).
  bool available() const { return available_; }
  // Available, and writes are not paused after a failure (new blocks are taken).
  bool writable() const { return available_ && !write_degraded_ && write_breaker_.allow(); }
  const std::string& path() const { return path_; }

  size_t header_bytes() const { return header_bytes_; }
  size_t payload_bytes() const { return payload_bytes_; }  // unpadded
  size_t slot_bytes() const { return slot_bytes_; }
  uint64_t slot_offset(int32_t slot) const { return static_cast<uint64_t>(slot) * slot_bytes_; }
  const BlockHash& fingerprint() const { return options_.fingerprint; }
  int block_size() const { return options_.spec.block_size; }
  uint64_t next_sequence() { return ++sequence_; }

  SlotIndex& slots() { return *slots_; }
  const SlotIndex& slots() const { return *slots_; }
  TierStats& mutable_stats() { return stats_; }

  // Performs the requests (any order, up to the queue depth at once), filling in each result.
  void execute(std::span<DiskIoRequest> requests);
  // Stops taking writes (or, with `reads_too`, serving anything) for good, logging the reason once.
  void degrade(const std::string& reason, bool reads_too);
  // A write failed (ENOSPC, EIO, ...) or succeeded: pauses writes with back-off, or resumes them.
  void write_failed(const std::string& reason);
  void write_succeeded();
  // Zeroes a slot's header on disk so no process trusts it again (a corrupt block reclaimed).
  void invalidate_on_disk(int32_t slot);
  // fdatasync: a clean shutdown makes the blocks durable, not only visible to the next process.
  void sync();

  // KVTier.
  TierKind kind() const override { return TierKind::kDisk; }
  int capacity_blocks() const override { return slots_ ? slots_->num_slots() : 0; }
  int num_cached_blocks() const override { return slots_ ? slots_->num_cached() : 0; }
  std::optional<int32_t> find(const BlockContentKey& key) const override;
  const TierStats& stats() const override { return stats_; }
  void check_invariants() const override;

 private:
  struct Backend;
  bool open_file();
  void rebuild_index();

  DiskTierOptions options_;
  std::string path_;
  int fd_ = -1;
  bool available_ = false;
  bool write_degraded_ = false;
  bool logged_ = false;
  CircuitBreaker write_breaker_;
  size_t header_bytes_ = 0;
  size_t payload_bytes_ = 0;
  size_t slot_bytes_ = 0;
  uint64_t sequence_ = 0;
  std::unique_ptr<SlotIndex> slots_;
  std::unique_ptr<Backend> backend_;
  TierStats stats_;
};

}  // namespace pagedkv
