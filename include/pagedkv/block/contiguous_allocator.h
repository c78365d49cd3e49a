// A first-fit allocator of contiguous ranges of block ids: the memory model of systems without
// paging (Orca and FasterTransformer in the PagedAttention paper), where a request's KV must live
// in one contiguous range of slots. Freed ranges coalesce with their free neighbours; holes too
// small for the next request are external fragmentation, which a paged pool never has.
//
// It only hands out ids; the scheduler's reservation policies (scheduler/kv_reservation.h) use it
// in place of the KV-cache manager, over the same pool of block ids, so the engine's arena, block
// tables and kernels are unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "pagedkv/block/range_allocator.h"

namespace pagedkv {

class ContiguousAllocator final : public RangeAllocator {
 public:
  // Manages ids [first, first + count). Throws ConfigError if count < 1 or first < 0.
  ContiguousAllocator(int32_t first, int32_t count);

  // The lowest-addressed free range of at least `length` ids (first fit), or nullopt when none
  // is long enough. Throws UsageError for length < 1.
  std::optional<int32_t> allocate(int32_t length) override;
  // Frees the range that allocate() returned starting at `start`; UsageError if there is none.
  void free(int32_t start) override;

  int32_t capacity() const override { return count_; }
  int32_t max_allocation() const override { return count_; }
  int32_t num_free() const override { return num_free_; }
  int32_t largest_free_run() const override;
  int num_allocated() const override { return static_cast<int>(allocated_.size()); }
  // Length of the allocated range starting at `start`, or 0.
  int32_t allocated_length(int32_t start) const override;
  // Free and allocated ranges tile [first, first + count) without overlap, free ranges are
  // coalesced (no two adjacent), and num_free() is their total. Throws InvariantError.
  void check_invariants() const override;

 private:
  int32_t first_;
  int32_t count_;
  int32_t num_free_;
  std::map<int32_t, int32_t> free_;  // start -> length, no two adjacent
  std::map<int32_t, int32_t> allocated_;  // start -> length
};

}  // namespace pagedkv
