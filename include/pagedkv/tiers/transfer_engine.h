// Asynchronous batched byte movements between the device arena, the host tier and the disk tier.
//
// A batch runs in two lanes, each a worker thread taking batches in submission order:
//   memory lane:  1. packs the sources of disk writes (device blocks, host slots) into aligned
//                    staging runs, with their headers and payload checksums;
//                 2. device -> host copies;   3. host -> device copies;
//                 (also: packs the values of remote-tier stores and hands them to the
//                 RemoteTier's own store lane, before anything overwrites their sources);
//                 then the batch's "memory" half is complete: every device block it reads may be
//                 overwritten, every host slot it reads may be reused;
//   disk lane:    4. disk writes, each run as soon as it is packed (overlapping the packing of
//                    the next), and reads (one I/O per run of adjacent slots, io_uring queue);
//                 5. verification of each read block (header, key, payload checksum) and its copy
//                    into the device arena; then the batch is done.
// Memory copies of runs of adjacent blocks (on both sides) are one memcpy per plane; adjacent disk
// slots are one I/O. Because both lanes keep submission order, a later batch never overtakes an
// earlier one on the same slots, and the owner needs no locks for the tiers' metadata: it only
// marks slots pinned while their bytes are in flight and applies results once a batch is done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/tiers/aligned_buffer.h"
#include "pagedkv/tiers/disk_slot_format.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

class DiskTier;
class RemoteTier;

// Why a movement happens: decides what the owner does when it completes.
enum class TransferPurpose : uint8_t {
  kOffload,  // an evicted device block written down (device -> host, device/host -> disk)
  kDemotion,  // a host LRU victim written to disk
  kFlush,  // a cached block written to disk at shutdown or write-through
  kSwap,  // a preempted request's block (out or in)
  kPromotion,  // a lower-tier block loaded into the device for a waiting request
};

struct MemoryCopy {
  int32_t src = 0;  // device block (device -> host) or host slot (host -> device)
  int32_t dst = 0;
  TransferPurpose purpose = TransferPurpose::kOffload;
  RequestId owner{};  // swap and promotion: the request
};

struct DiskWrite {
  TierKind source = TierKind::kDevice;  // kDevice or kHost
  int32_t source_block = 0;
  int32_t slot = 0;
  DiskSlotHeader header;  // key, sequence, flags; the engine fills the rest
  TransferPurpose purpose = TransferPurpose::kOffload;
  RequestId owner{};
  bool ok = false;  // result
  int error = 0;  // errno of a failed write
};

enum class ReadResult : uint8_t { kPending, kOk, kIoError, kShortRead, kCorrupt };

struct DiskRead {
  int32_t slot = 0;
  int32_t device_block = 0;
  StoredBlockKey expected;  // the block must carry exactly this key
  uint16_t expected_flags = 0;
  TransferPurpose purpose = TransferPurpose::kPromotion;
  RequestId owner{};
  ReadResult result = ReadResult::kPending;
  int error = 0;
};

// A block to store in the remote tier: packed on the memory lane, sent by the RemoteTier.
struct RemotePut {
  TierKind source = TierKind::kDevice;  // kDevice or kHost
  int32_t source_block = 0;
  StoredBlockKey key;
};

struct TransferBatch {
  std::vector<DiskWrite> disk_writes;
  std::vector<RemotePut> remote_puts;
  std::vector<MemoryCopy> device_to_host;
  std::vector<MemoryCopy> host_to_device;
  std::vector<DiskRead> disk_reads;
  bool empty() const {
    return disk_writes.empty() && device_to_host.empty() && host_to_device.empty() && disk_reads.empty() &&
           remote_puts.empty();
  }
  bool has_disk_io() const { return !disk_writes.empty() || !disk_reads.empty(); }
  size_t size() const {
    return disk_writes.size() + device_to_host.size() + host_to_device.size() + disk_reads.size() + remote_puts.size();
  }
};

struct TransferEngineStats {
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> memory_runs{0};  // memcpy runs (after coalescing)
  std::atomic<uint64_t> memory_blocks{0};
  std::atomic<uint64_t> disk_ios{0};  // I/O requests (after coalescing)
  std::atomic<uint64_t> disk_blocks{0};
  std::atomic<uint64_t> disk_bytes{0};
  std::atomic<uint64_t> remote_packed{0};  // values packed for the remote tier
};

class TransferHandle {
 public:
  TransferHandle() = default;
  bool valid() const { return state_ != nullptr; }
  // The batch's device reads and host-slot reads are finished.
  bool memory_done() const;
  bool done() const;
  void wait_memory() const;
  void wait() const;
  // The batch with its results (read them once done()).
  const TransferBatch& batch() const;
  uint64_t id() const;

 private:
  friend class TransferEngine;
  struct State;
  std::shared_ptr<State> state_;
};

class TransferEngine {
 public:
  // `host`, `disk` and `remote` may be null (no such tier). They and `device` must outlive the engine.
  TransferEngine(KVArena& device, KVArena* host, DiskTier* disk, RemoteTier* remote = nullptr);
  ~TransferEngine();  // finishes every submitted batch, then joins the lanes
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  TransferHandle submit(TransferBatch batch);
  const TransferEngineStats& stats() const { return stats_; }

 private:
  struct Lane {
    std::mutex m;
    std::condition_variable cv;
    std::deque<std::shared_ptr<TransferHandle::State>> queue;
    bool stop = false;
    std::thread thread;
  };
  void memory_lane();
  void disk_lane();
  void run_memory(const std::shared_ptr<TransferHandle::State>& s);
  void write_run(TransferHandle::State& s, size_t index);
  void run_disk(TransferHandle::State& s);
  static void push(Lane& lane, std::shared_ptr<TransferHandle::State> s);
  static std::shared_ptr<TransferHandle::State> pop(Lane& lane);

  // Staging buffers are reused across batches: a fresh 8 MiB buffer per run costs page faults
  // and a zeroing pass, as much as packing the blocks.
  AlignedBuffer take_staging(size_t bytes);
  void give_staging(AlignedBuffer buffer);

  KVArena& device_;
  KVArena* host_;
  std::mutex staging_mutex_;
  std::vector<AlignedBuffer> staging_;
  DiskTier* disk_;
  RemoteTier* remote_;
  uint64_t next_id_ = 1;
  TransferEngineStats stats_;
  Lane memory_;
  Lane disk_lane_;
};

}  // namespace pagedkv
