// SwapStore: where the blocks of swapped-out (preempted) requests wait until they swap back in.
//
// A victim's blocks go to pinned host slots, and to pinned disk slots when the host tier is full
// (host cached blocks are demoted to make room first); swap-in loads them into new device
// blocks. A disk block that fails verification makes the swap-in fail: the scheduler then
// recomputes the request (never feeds it bad KV). A swapped block's disk slot carries a private
// key (the owner and the block's index), so a swap-in verifies it reads its own block and no
// prefix lookup ever finds it.
//
// With lazy copies, a victim block that stays in the device prefix cache after the victim frees
// it is not copied at swap-out: its slot is reserved, and the copy is made only when the device
// cache drops the block (on_device_uncache, while its bytes are intact) or when the swap-in needs
// it past the prefix the device cache still holds. Blocks resumed from the device cache are then
// never copied at all.
//
// The store decides where each block goes and keeps the records; it queues the byte movements
// into the caller's TransferBatch and is told their results (the *_done calls). Submitting
// batches and waiting for them is the caller's (TieredKVCache). Every slot a swapped block holds
// stays pinned until its load is queued (the pin then belongs to the load) or the swap is dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/tiers/disk_tier.h"
#include "pagedkv/tiers/host_tier.h"
#include "pagedkv/tiers/tier_types.h"
#include "pagedkv/tiers/transfer_engine.h"

namespace pagedkv {

class SwapStore {
 public:
  enum class SwapInState { kDone, kLoading, kFailed };

  // `host` and `disk` (either may be null) must outlive the store. `block_size`: tokens per
  // block. `lazy_copies`: defer the copies of device-cached blocks (see above).
  // `evict_host_slot` is called for a cached host slot a swap-out takes over (the caller demotes
  // its block); it may consult disk_slots_reserved().
  SwapStore(HostTier* host, DiskTier* disk, int block_size, bool lazy_copies,
            std::function<void(int32_t)> evict_host_slot);

  bool contains(RequestId id) const { return swaps_.contains(id); }
  // Blocks swap_out() could take now.
  int capacity_blocks() const;
  // Disk slots the swap-out in progress still needs: a host slot it evicts must not be demoted
  // into them.
  int disk_slots_reserved() const { return disk_reserve_; }

  // Takes slots for the victim's blocks and queues their copies into `pending` (deferred for
  // blocks `pool` still caches, with lazy copies). False, with nothing changed, when there is no
  // room. Throws UsageError if `id` is already swapped out.
  bool swap_out(RequestId id, std::span<const BlockId> blocks, const BlockPool& pool, TransferBatch& pending);
  // The device pool is dropping `device_block` from its cache: queues the deferred copies that
  // read it, now that its bytes are still intact.
  void on_device_uncache(int32_t device_block, TransferBatch& pending);

  // A swap-in in two steps, so that a load never overtakes the write of its own slot:
  // begin_swap_in() settles the deferred copies of swapped blocks [first_block, first_block +
  // count) — copies needed ones into their slots (queued into `pending`), skips the others — and
  // returns whether it queued any; the caller then completes those writes before
  // queue_swap_in_loads() queues the loads into `dst` and releases the slots of the blocks before
  // first_block. Throws UsageError when `id` is not swapped out, already loading, or the range
  // lies outside its blocks.
  bool begin_swap_in(RequestId id, int first_block, int count, TransferBatch& pending);
  void queue_swap_in_loads(RequestId id, int first_block, std::span<const BlockId> dst, TransferBatch& pending);
  // kLoading while the swap-in has not started or blocks are in flight; else kDone or kFailed,
  // once: the swap is then forgotten. Throws UsageError when `id` is not swapped out.
  SwapInState finish_swap_in(RequestId id);
  // Whether the swap has loads in flight (the caller waits for them before drop()).
  bool loads_in_flight(RequestId id) const;
  // Releases the swap's slots and forgets its deferred copies; no loads may be in flight.
  void drop(RequestId id);

  // Results of the queued transfers of purpose kSwap, by owner.
  void write_done(RequestId owner, bool ok);  // a swap-out write to disk
  void host_load_done(RequestId owner);  // a swap-in copy from the host
  void disk_load_done(RequestId owner, bool ok);  // a swap-in read from disk (ok: verified)

  // Adds the pins the swapped blocks own to the per-slot counts.
  void count_pins(std::vector<int32_t>& host_pins, std::vector<int32_t>& disk_pins) const;
  // Every deferred copy belongs to a swapped block and reads a block `pool` still caches.
  void check_invariants(const BlockPool& pool) const;

 private:
  // Where one swapped block waits.
  struct SwappedBlock {
    TierKind tier;
    int32_t slot;  // -1 once its load is queued (or the slot released)
    int32_t deferred_block = -1;  // lazy copies: the device block still to copy into the slot
  };
  struct SwapRecord {
    std::vector<SwappedBlock> blocks;
    int in_flight = 0;  // swap-in loads not yet applied
    bool loading = false;
    bool failed = false;  // a block could not be written or failed verification
  };
  struct DeferredCopy {
    RequestId owner;
    int index = 0;
  };

  SwapRecord& record(RequestId id, const char* caller);
  SlotIndex& slots_of(TierKind tier) { return tier == TierKind::kHost ? host_->slots() : disk_->slots(); }
  TierStats& stats_of(TierKind tier) {
    return tier == TierKind::kHost ? host_->mutable_stats() : disk_->mutable_stats();
  }
  // Queues the copy of swapped block `index` of `owner` from `device_block` into its slot.
  void queue_copy(RequestId owner, int index, int32_t device_block, const SwappedBlock& b, TransferBatch& pending);
  void forget_deferred(int32_t device_block, RequestId owner);  // `owner` no longer waits for its copy

  HostTier* host_;
  DiskTier* disk_;
  int block_size_;
  bool lazy_copies_;
  std::function<void(int32_t)> evict_host_slot_;
  std::unordered_map<RequestId, SwapRecord> swaps_;
  // Device block -> the swapped blocks (of one or more victims sharing it) awaiting its copy.
  std::unordered_map<int32_t, std::vector<DeferredCopy>> deferred_;
  int disk_reserve_ = 0;
};

}  // namespace pagedkv
