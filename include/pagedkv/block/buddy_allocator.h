// A binary buddy allocator of contiguous ranges of block ids (Knuth's buddy system, as the
// PagedAttention paper assumes for its Orca baselines): a request for n ids gets an aligned
// range of the next power of two >= n, split from the smallest larger free range; a freed range
// merges with its buddy (the other half of the range it was split from) whenever that is free.
// The rounding is internal fragmentation, free ranges that cannot merge are external.
//
// A pool that is not a power of two is cut into aligned power-of-two segments, largest first
// (1,023 ids: 512 + 256 + ... + 1); ranges never merge across segments.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "pagedkv/block/range_allocator.h"

namespace pagedkv {

class BuddyAllocator final : public RangeAllocator {
 public:
  // Manages ids [first, first + count). Throws ConfigError if count < 1 or first < 0.
  BuddyAllocator(int32_t first, int32_t count);

  // The lowest-addressed free range of the smallest order that fits (split down as needed).
  std::optional<int32_t> allocate(int32_t length) override;
  void free(int32_t start) override;

  int32_t capacity() const override { return count_; }
  int32_t max_allocation() const override { return int32_t{1} << segments_.front().second; }  // the largest segment
  int32_t num_free() const override { return num_free_; }
  int32_t largest_free_run() const override;  // the largest free range (ranges never merge across buddies)
  int num_allocated() const override { return static_cast<int>(allocated_.size()); }
  int32_t allocated_length(int32_t start) const override;
  // Free ranges are aligned to their size, inside one segment, disjoint from each other and from
  // the allocated ranges, together tile the pool, no two free buddies of one order coexist
  // (they would have merged), and num_free() is their total. Throws InvariantError.
  void check_invariants() const override;

 private:
  // The order of the segment holding `offset` (offsets are relative to first_).
  int segment_order(int32_t offset) const;

  int32_t first_;
  int32_t count_;
  int32_t num_free_;
  std::vector<std::set<int32_t>> free_;  // per order: offsets of free ranges of 2^order ids
  std::map<int32_t, int> allocated_;  // offset -> order
  std::vector<std::pair<int32_t, int>> segments_;  // (offset, order), by offset
};

}  // namespace pagedkv
