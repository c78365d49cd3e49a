#include "pagedkv/tiers/transfer_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

#include "pagedkv/core/error.h"
#include "pagedkv/tiers/block_copy.h"
#include "pagedkv/tiers/disk_tier.h"
#include "pagedkv/tiers/remote_tier.h"

namespace pagedkv {
namespace {

// A run of adjacent disk slots moved with one I/O: ops[k] is the batch op for slot first + k.
struct SlotRun {
  int32_t first = 0;
  std::vector<size_t> ops;
  AlignedBuffer buffer;
};

constexpr size_t kMaxRunBytes = size_t{8} << 20;

template <typename Op, typename Take>
std::vector<SlotRun> make_runs(const std::vector<Op>& ops, size_t slot_bytes, Take&& take) {
  std::vector<size_t> order(ops.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ops[a].slot < ops[b].slot; });
  const size_t max_slots = std::max<size_t>(1, kMaxRunBytes / slot_bytes);
  std::vector<SlotRun> runs;
  for (size_t i : order) {
    SlotRun* last = runs.empty() ? nullptr : &runs.back();
    if (last && last->first + static_cast<int32_t>(last->ops.size()) == ops[i].slot && last->ops.size() < max_slots) {
      last->ops.push_back(i);
    } else {
      runs.emplace_back();
      runs.back().first = ops[i].slot;
      runs.back().ops.push_back(i);
    }
  }
  for (SlotRun& r : runs) r.buffer = take(r.ops.size() * slot_bytes);
  return runs;
}

}  // namespace

struct TransferHandle::State {
  TransferBatch batch;
  uint64_t id = 0;
  std::vector<SlotRun> write_runs;
  size_t runs_written = 0;  // disk lane only
  mutable std::mutex m;
  mutable std::condition_variable cv;
  bool memory_done = false;
  bool done = false;
  std::atomic<bool> memory_done_flag{false};
  std::atomic<bool> done_flag{false};
};

bool TransferHandle::memory_done() const { return !state_ || state_->memory_done_flag.load(std::memory_order_acquire); }
bool TransferHandle::done() const { return !state_ || state_->done_flag.load(std::memory_order_acquire); }

void TransferHandle::wait_memory() const {
  if (!state_ || memory_done()) return;
  std::unique_lock lock(state_->m);
  state_->cv.wait(lock, [&] { return state_->memory_done; });
}

void TransferHandle::wait() const {
  if (!state_ || done()) return;
  std::unique_lock lock(state_->m);
  state_->cv.wait(lock, [&] { return state_->done; });
}

const TransferBatch& TransferHandle::batch() const {
  if (!state_) throw UsageError("TransferHandle::batch: empty handle");
  return state_->batch;
}

uint64_t TransferHandle::id() const { return state_ ? state_->id : 0; }

TransferEngine::TransferEngine(KVArena& device, KVArena* host, DiskTier* disk, RemoteTier* remote)
    : device_(device), host_(host), disk_(disk), remote_(remote) {
  memory_.thread = std::thread([this] { memory_lane(); });
  disk_lane_.thread = std::thread([this] { disk_lane(); });
}

TransferEngine::~TransferEngine() {
  for (Lane* lane : {&memory_, &disk_lane_}) {
    {
      std::lock_guard lock(lane->m);
      lane->stop = true;
    }
    lane->cv.notify_all();
    lane->thread.join();  // the memory lane drains first, so the disk lane sees every batch
  }
}

void TransferEngine::push(Lane& lane, std::shared_ptr<TransferHandle::State> s) {
  {
    std::lock_guard lock(lane.m);
    lane.queue.push_back(std::move(s));
  }
  lane.cv.notify_one();
}

std::shared_ptr<TransferHandle::State> TransferEngine::pop(Lane& lane) {
  std::unique_lock lock(lane.m);
  lane.cv.wait(lock, [&] { return lane.stop || !lane.queue.empty(); });
  if (lane.queue.empty()) return nullptr;  // stopping, and drained
  auto s = std::move(lane.queue.front());
  lane.queue.pop_front();
  return s;
}

AlignedBuffer TransferEngine::take_staging(size_t bytes) {
  {
    std::lock_guard lock(staging_mutex_);
    for (size_t i = 0; i < staging_.size(); ++i) {
      if (staging_[i].size() >= bytes) {
        AlignedBuffer b = std::move(staging_[i]);
        staging_.erase(staging_.begin() + static_cast<ptrdiff_t>(i));
        return b;
      }
    }
  }
  return AlignedBuffer(std::max(bytes, kMaxRunBytes), kDiskAlignment, /*zero=*/false);
}

void TransferEngine::give_staging(AlignedBuffer buffer) {
  std::lock_guard lock(staging_mutex_);
  if (staging_.size() < 8) staging_.push_back(std::move(buffer));  // at most 64 MiB kept
}

TransferHandle TransferEngine::submit(TransferBatch batch) {
  if (batch.has_disk_io() && disk_ == nullptr)
    throw UsageError("TransferEngine: disk I/O submitted without a disk tier");
  if ((!batch.device_to_host.empty() || !batch.host_to_device.empty()) && host_ == nullptr)
    throw UsageError("TransferEngine: host copies submitted without a host tier");
  for (const DiskWrite& w : batch.disk_writes)
    if (w.source == TierKind::kHost && host_ == nullptr)
      throw UsageError("TransferEngine: host source without a host tier");
  if (!batch.remote_puts.empty() && remote_ == nullptr)
    throw UsageError("TransferEngine: remote stores submitted without a remote tier");
  for (const RemotePut& p : batch.remote_puts)
    if (p.source == TierKind::kHost && host_ == nullptr)
      throw UsageError("TransferEngine: host source without a host tier");
  TransferHandle h;
  h.state_ = std::make_shared<TransferHandle::State>();
  h.state_->batch = std::move(batch);
  h.state_->id = next_id_++;
  ++stats_.batches;
  push(memory_, h.state_);
  return h;
}

void TransferEngine::memory_lane() {
  while (auto s = pop(memory_)) {
    run_memory(s);
    {
      std::lock_guard lock(s->m);
      s->memory_done = true;
      s->memory_done_flag.store(true, std::memory_order_release);
      if (!s->batch.has_disk_io()) {
        s->done = true;
        s->done_flag.store(true, std::memory_order_release);
      }
    }
    s->cv.notify_all();
    if (s->batch.has_disk_io()) push(disk_lane_, std::move(s));
  }
}

void TransferEngine::disk_lane() {
  // A batch arrives once per packed write run (written at once, while the memory lane packs the
  // next run), then once more for its reads and completion.
  while (auto s = pop(disk_lane_)) {
    if (s->runs_written < s->write_runs.size()) {
      write_run(*s, s->runs_written++);
      continue;
    }
    run_disk(*s);
    {
      std::lock_guard lock(s->m);
      s->done = true;
      s->done_flag.store(true, std::memory_order_release);
    }
    s->cv.notify_all();
  }
}

void TransferEngine::run_memory(const std::shared_ptr<TransferHandle::State>& state) {
  TransferHandle::State& s = *state;
  TransferBatch& b = s.batch;
  // 1. Pack disk-write sources before anything overwrites them (a demoted host slot is refilled
  //    by a device -> host copy of the same batch).
  if (!b.disk_writes.empty()) {
    const size_t slot = disk_->slot_bytes(), header = disk_->header_bytes(), payload = disk_->payload_bytes();
    s.write_runs = make_runs(b.disk_writes, slot, [this](size_t n) { return take_staging(n); });
    for (SlotRun& run : s.write_runs) {
      for (size_t k = 0; k < run.ops.size(); ++k) {
        DiskWrite& w = b.disk_writes[run.ops[k]];
        std::byte* base = run.buffer.data() + k * slot;
        if (w.source == TierKind::kHost) gather_block(*host_, w.source_block, base + header);
        else gather_block(device_, w.source_block, base + header);
        std::memset(base + header + payload, 0, slot - header - payload);  // the padding
        w.header.fingerprint = disk_->fingerprint();
        w.header.payload_bytes = payload;
        w.header.payload_checksum = payload_checksum(std::span<const std::byte>(base + header, payload));
        encode_slot_header(w.header, std::span<std::byte>(base, header));
      }
      push(disk_lane_, state);  // the disk lane writes this run while the next one is packed
    }
  }
  // Remote stores are packed here too, for the same reason; the remote tier's lane sends them.
  for (const RemotePut& p : b.remote_puts) {
    remote_->store(p.source == TierKind::kHost ? *host_ : device_, p.source_block, p.key);
    ++stats_.remote_packed;
  }
  // 2, 3. Copies between the device arena and the host tier, coalesced into runs.
  std::vector<std::pair<int32_t, int32_t>> pairs;
  if (!b.device_to_host.empty()) {
    pairs.clear();
    for (const MemoryCopy& c : b.device_to_host) pairs.emplace_back(c.src, c.dst);
    stats_.memory_runs += copy_block_runs(device_, *host_, pairs);
    stats_.memory_blocks += pairs.size();
  }
  if (!b.host_to_device.empty()) {
    pairs.clear();
    for (const MemoryCopy& c : b.host_to_device) pairs.emplace_back(c.src, c.dst);
    stats_.memory_runs += copy_block_runs(*host_, device_, pairs);
    stats_.memory_blocks += pairs.size();
  }
}

void TransferEngine::write_run(TransferHandle::State& s, size_t index) {
  SlotRun& run = s.write_runs[index];
  const size_t slot = disk_->slot_bytes();
  DiskIoRequest req{true, disk_->slot_offset(run.first), run.buffer.data(), run.ops.size() * slot, 0};
  disk_->execute(std::span<DiskIoRequest>(&req, 1));
  ++stats_.disk_ios;
  stats_.disk_blocks += run.ops.size();
  for (size_t k = 0; k < run.ops.size(); ++k) {
    DiskWrite& w = s.batch.disk_writes[run.ops[k]];
    w.ok = req.result >= static_cast<int64_t>((k + 1) * slot);
    w.error = w.ok ? 0 : (req.result < 0 ? static_cast<int>(-req.result) : ENOSPC);
    if (w.ok) stats_.disk_bytes += slot;
  }
  give_staging(std::move(run.buffer));
}

void TransferEngine::run_disk(TransferHandle::State& s) {
  TransferBatch& b = s.batch;
  const size_t slot = disk_->slot_bytes(), header = disk_->header_bytes(), payload = disk_->payload_bytes();
  std::vector<SlotRun> read_runs = make_runs(b.disk_reads, slot, [this](size_t n) { return take_staging(n); });
  std::vector<DiskIoRequest> reqs;
  for (SlotRun& run : read_runs)
    reqs.push_back(DiskIoRequest{false, disk_->slot_offset(run.first), run.buffer.data(), run.ops.size() * slot, 0});
  disk_->execute(reqs);
  stats_.disk_ios += reqs.size();
  stats_.disk_blocks += b.disk_reads.size();
  size_t r = 0;
  for (SlotRun& run : read_runs) {
    const int64_t got = reqs[r++].result;
    for (size_t k = 0; k < run.ops.size(); ++k) {
      DiskRead& rd = b.disk_reads[run.ops[k]];
      if (got < 0) {
        rd.result = ReadResult::kIoError;
        rd.error = static_cast<int>(-got);
        continue;
      }
      if (got < static_cast<int64_t>((k + 1) * slot)) {
        rd.result = ReadResult::kShortRead;
        continue;
      }
      const std::byte* base = run.buffer.data() + k * slot;
      DiskSlotHeader h;
      const SlotHeaderStatus st = decode_slot_header(std::span<const std::byte>(base, header), disk_->fingerprint(),
                                                     disk_->block_size(), payload, h);
      const bool ok = st == SlotHeaderStatus::kOk && h.flags == rd.expected_flags &&
                      rd.expected.matches(h.key.view()) &&
                      payload_checksum(std::span<const std::byte>(base + header, payload)) == h.payload_checksum;
      if (!ok) {
        rd.result = ReadResult::kCorrupt;
        continue;
      }
      scatter_block(base + header, device_, rd.device_block);
      rd.result = ReadResult::kOk;
      stats_.disk_bytes += slot;
    }
  }
  for (SlotRun& run : read_runs) give_staging(std::move(run.buffer));
}

}  // namespace pagedkv
