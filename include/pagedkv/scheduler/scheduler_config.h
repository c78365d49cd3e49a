// Knobs of the continuous-batching scheduler.
#pragma once

#include <string_view>

#include "pagedkv/block/range_allocator.h"
#include "pagedkv/scheduler/kv_reservation.h"

namespace pagedkv {

// What happens to a running request's KV when the pool runs out.
enum class PreemptionMode {
  kRecompute,  // free its blocks; re-prefill later (full blocks usually return from the prefix cache)
  kSwap,  // copy its blocks to the host swap space; copy them back before it runs again
  kAuto,  // swap long sequences while the host has room, recompute short ones
};
std::string_view preemption_mode_name(PreemptionMode m);

struct SchedulerConfig {
  int max_num_seqs = 64;  // requests running at once
  int max_num_batched_tokens = 2048;  // tokens per step (decode tokens + prefill chunks)
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  // kAuto swaps a victim with at least this many computed tokens. Recompute costs a prefill
  // (compute grows with length, and quadratically in attention); swap costs two copies of the
  // bytes; below a few hundred tokens re-prefilling is as cheap as moving the bytes twice.
  int swap_threshold_tokens = 256;
  // Admission hysteresis on pool usage: stop admitting above the high mark, resume below the low
  // mark, so the engine does not oscillate between admitting and preempting.
  double admit_high_watermark = 0.95;
  double admit_low_watermark = 0.80;
  // Swap space without KV tiers: a victim block that stays in the device prefix cache after the
  // victim frees it is copied to host only if the pool drops it (evicted for reuse, invalidated,
  // reset) before the victim resumes; blocks resumed from the device cache are never copied.
  // (With tiers, TierConfig::lazy_swap_copies does the same.)
  bool lazy_swap_copies = false;
  // How a request holds KV memory (kv_reservation.h). kPaged is the normal path; the others
  // reserve each request's sequence contiguously at admission (the PagedAttention paper's Orca
  // baselines: no paging, no preemption, no prefix sharing, no parallel sampling).
  KVReservation kv_reservation = KVReservation::kPaged;
  // How those contiguous ranges are placed (block/range_allocator.h): the buddy system, which the
  // paper's Orca baselines use (its §6.1), or first fit. Ignored when paged.
  RangeAllocation range_allocation = RangeAllocation::kBuddy;
  void validate() const;  // throws ConfigError
};

}  // namespace pagedkv
