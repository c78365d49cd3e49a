#include "pagedkv/tiers/swap_store.h"

#include <fmt/format.h>

#include <algorithm>

#include "pagedkv/core/error.h"
#include "pagedkv/tiers/disk_slot_format.h"

namespace pagedkv {
namespace {

// The key a swapped-out block carries on disk: the owner and the block's index, so a swap-in
// verifies it reads its own block.
StoredBlockKey swap_key(RequestId owner, int index, int block_size) {
  StoredBlockKey k;
  k.hash = BlockHash{owner.value, static_cast<uint64_t>(index)};
  k.tokens.assign(static_cast<size_t>(block_size), 0);
  return k;
}

}  // namespace

SwapStore::SwapStore(HostTier* host, DiskTier* disk, int block_size, bool lazy_copies,
                     std::function<void(int32_t)> evict_host_slot)
    : host_(host),
      disk_(disk),
      block_size_(block_size),
      lazy_copies_(lazy_copies),
      evict_host_slot_(std::move(evict_host_slot)) {}

int SwapStore::capacity_blocks() const {
  int n = host_ ? host_->slots().num_allocatable() : 0;
  if (disk_ && disk_->writable()) n += disk_->slots().num_allocatable();
  return n;
}

SwapStore::SwapRecord& SwapStore::record(RequestId id, const char* caller) {
  auto it = swaps_.find(id);
  if (it == swaps_.end()) throw UsageError(fmt::format("{}: request {} is not swapped out", caller, id.value));
  return it->second;
}

void SwapStore::queue_copy(RequestId owner, int index, int32_t device_block, const SwappedBlock& b,
                           TransferBatch& pending) {
  if (b.tier == TierKind::kHost) {
    pending.device_to_host.push_back(MemoryCopy{device_block, b.slot, TransferPurpose::kSwap, owner});
    return;
  }
  DiskWrite w;
  w.source = TierKind::kDevice;
  w.source_block = device_block;
  w.slot = b.slot;
  w.header.key = swap_key(owner, index, block_size_);
  w.header.sequence = disk_->next_sequence();
  w.header.flags = kSlotFlagPrivate;
  w.purpose = TransferPurpose::kSwap;
  w.owner = owner;
  pending.disk_writes.push_back(std::move(w));
}

bool SwapStore::swap_out(RequestId id, std::span<const BlockId> blocks, const BlockPool& pool, TransferBatch& pending) {
  if (swaps_.contains(id)) throw UsageError(fmt::format("swap_out: request {} is already swapped out", id.value));
  const int n = static_cast<int>(blocks.size());
  const int host_avail = host_ ? host_->slots().num_allocatable() : 0;
  const int disk_avail = disk_ && disk_->writable() ? disk_->slots().num_allocatable() : 0;
  const int host_take = std::min(n, host_avail);
  const int disk_take = n - host_take;
  if (disk_take > disk_avail) return false;
  SwapRecord rec;
  disk_reserve_ = disk_take;  // host victims are demoted only into disk slots the swap does not need
  for (int i = 0; i < host_take; ++i) {
    const int32_t slot = host_->slots().allocate(evict_host_slot_);
    if (slot < 0) throw InvariantError("swap_out: the host tier refused a slot it reported free");
    rec.blocks.push_back(SwappedBlock{TierKind::kHost, slot});
  }
  disk_reserve_ = 0;
  for (int i = host_take; i < n; ++i) {
    TierStats& ds = disk_->mutable_stats();
    const int32_t slot = disk_->slots().allocate([&ds](int32_t) { ++ds.evictions; });
    if (slot < 0) throw InvariantError("swap_out: the disk tier refused a slot it reported free");
    rec.blocks.push_back(SwappedBlock{TierKind::kDisk, slot});
  }
  for (int i = 0; i < n; ++i) {
    SwappedBlock& b = rec.blocks[static_cast<size_t>(i)];
    const int32_t block = blocks[static_cast<size_t>(i)].value;
    // A full block in the device prefix cache keeps its bytes after the victim frees it, until the
    // pool drops it (on_device_uncache): copy it then, if ever.
    if (lazy_copies_ && pool.block(BlockId{block}).has_hash) {
      b.deferred_block = block;
      deferred_[block].push_back(DeferredCopy{id, i});
      ++stats_of(b.tier).swap_copies_deferred;
    } else {
      queue_copy(id, i, block, b, pending);
    }
  }
  if (host_) host_->mutable_stats().swapped_out_blocks += static_cast<uint64_t>(host_take);
  if (disk_) disk_->mutable_stats().swapped_out_blocks += static_cast<uint64_t>(disk_take);
  swaps_.emplace(id, std::move(rec));
  return true;
}

void SwapStore::forget_deferred(int32_t device_block, RequestId owner) {
  auto it = deferred_.find(device_block);
  std::erase_if(it->second, [&](const DeferredCopy& d) { return d.owner == owner; });
  if (it->second.empty()) deferred_.erase(it);
}

void SwapStore::on_device_uncache(int32_t device_block, TransferBatch& pending) {
  auto it = deferred_.find(device_block);
  if (it == deferred_.end()) return;
  for (const DeferredCopy& d : it->second) {
    SwappedBlock& b = swaps_.at(d.owner).blocks[static_cast<size_t>(d.index)];
    queue_copy(d.owner, d.index, b.deferred_block, b, pending);
    b.deferred_block = -1;
  }
  deferred_.erase(it);
}

bool SwapStore::begin_swap_in(RequestId id, int first_block, int count, TransferBatch& pending) {
  SwapRecord& rec = record(id, "start_swap_in");
  if (rec.loading) throw UsageError(fmt::format("start_swap_in: request {} is already swapping in", id.value));
  const int n = static_cast<int>(rec.blocks.size());
  if (first_block < 0 || first_block + count > n)
    throw UsageError(fmt::format("start_swap_in: blocks [{}, {}) outside the {} swapped blocks", first_block,
                                 first_block + count, n));
  // Blocks before first_block are resumed from the device cache and never copied; needed ones
  // are copied into their slots now, ahead of the loads.
  bool copied_deferred = false;
  for (int i = 0; i < n; ++i) {
    SwappedBlock& b = rec.blocks[static_cast<size_t>(i)];
    if (b.deferred_block < 0) continue;
    forget_deferred(b.deferred_block, id);
    const int k = i - first_block;
    if (k < 0 || k >= count) {
      ++stats_of(b.tier).swap_copies_skipped;
    } else {
      queue_copy(id, i, b.deferred_block, b, pending);
      copied_deferred = true;
    }
    b.deferred_block = -1;
  }
  return copied_deferred;
}

void SwapStore::queue_swap_in_loads(RequestId id, int first_block, std::span<const BlockId> dst,
                                    TransferBatch& pending) {
  SwapRecord& rec = record(id, "start_swap_in");
  const int n = static_cast<int>(rec.blocks.size());
  for (int i = 0; i < n; ++i) {
    SwappedBlock& b = rec.blocks[static_cast<size_t>(i)];
    const int k = i - first_block;
    if (k < 0 || k >= static_cast<int>(dst.size())) {  // not needed: release
      slots_of(b.tier).unpin(b.slot);
    } else if (b.tier == TierKind::kHost) {
      pending.host_to_device.push_back(
          MemoryCopy{b.slot, dst[static_cast<size_t>(k)].value, TransferPurpose::kSwap, id});
      ++rec.in_flight;
    } else {
      DiskRead rd;
      rd.slot = b.slot;
      rd.device_block = dst[static_cast<size_t>(k)].value;
      rd.expected = swap_key(id, i, block_size_);
      rd.expected_flags = kSlotFlagPrivate;
      rd.purpose = TransferPurpose::kSwap;
      rd.owner = id;
      pending.disk_reads.push_back(std::move(rd));
      ++rec.in_flight;
    }
    b.slot = -1;  // the pin now belongs to the load (or is released)
  }
  rec.loading = true;
}

SwapStore::SwapInState SwapStore::finish_swap_in(RequestId id) {
  auto it = swaps_.find(id);
  if (it == swaps_.end()) throw UsageError(fmt::format("poll_swap_in: request {} is not swapped out", id.value));
  if (!it->second.loading || it->second.in_flight > 0) return SwapInState::kLoading;
  const SwapInState s = it->second.failed ? SwapInState::kFailed : SwapInState::kDone;
  swaps_.erase(it);
  return s;
}

bool SwapStore::loads_in_flight(RequestId id) const {
  auto it = swaps_.find(id);
  return it != swaps_.end() && it->second.in_flight > 0;
}

void SwapStore::drop(RequestId id) {
  auto it = swaps_.find(id);
  if (it == swaps_.end()) return;
  for (const SwappedBlock& b : it->second.blocks) {
    if (b.deferred_block >= 0) {
      forget_deferred(b.deferred_block, id);
      ++stats_of(b.tier).swap_copies_skipped;
    }
    if (b.slot >= 0) slots_of(b.tier).unpin(b.slot);
  }
  swaps_.erase(it);
}

void SwapStore::write_done(RequestId owner, bool ok) {
  if (!ok)
    if (auto it = swaps_.find(owner); it != swaps_.end()) it->second.failed = true;
  // The slot stays pinned by the swapped-out request.
}

void SwapStore::host_load_done(RequestId owner) {
  ++host_->mutable_stats().swapped_in_blocks;
  if (auto it = swaps_.find(owner); it != swaps_.end()) --it->second.in_flight;
}

void SwapStore::disk_load_done(RequestId owner, bool ok) {
  if (auto it = swaps_.find(owner); it != swaps_.end()) {
    --it->second.in_flight;
    if (!ok) it->second.failed = true;
    else ++disk_->mutable_stats().swapped_in_blocks;
  }
}

void SwapStore::count_pins(std::vector<int32_t>& host_pins, std::vector<int32_t>& disk_pins) const {
  for (const auto& [id, rec] : swaps_)
    for (const SwappedBlock& b : rec.blocks)
      if (b.slot >= 0) ++(b.tier == TierKind::kHost ? host_pins : disk_pins)[static_cast<size_t>(b.slot)];
}

void SwapStore::check_invariants(const BlockPool& pool) const {
  for (const auto& [block, copies] : deferred_) {
    // A deferred swap copy reads a block the device cache still holds, recorded in its swap.
    if (copies.empty()) throw InvariantError(fmt::format("deferred swap copies of device block {}: none", block));
    for (const DeferredCopy& d : copies) {
      auto it = swaps_.find(d.owner);
      if (it == swaps_.end() || d.index < 0 || d.index >= static_cast<int>(it->second.blocks.size()) ||
          it->second.blocks[static_cast<size_t>(d.index)].deferred_block != block)
        throw InvariantError(fmt::format("deferred swap copy of device block {} has no matching swapped block", block));
    }
    if (!pool.block(BlockId{block}).has_hash)
      throw InvariantError(
          fmt::format("deferred swap copy of device block {}: the device cache dropped it uncopied", block));
  }
}

}  // namespace pagedkv
