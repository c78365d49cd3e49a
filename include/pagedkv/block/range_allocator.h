// What the KV reservation policies (scheduler/kv_reservation.h) need from an allocator of
// contiguous ranges of block ids: the memory model of systems without paging, where a request's
// KV lives in one contiguous range. Two strategies: first fit (ContiguousAllocator) and the
// binary buddy system (BuddyAllocator, which the PagedAttention paper's Orca baselines assume).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace pagedkv {

enum class RangeAllocation { kFirstFit, kBuddy };
std::string_view range_allocation_name(RangeAllocation a);
// "first-fit" or "buddy"; ConfigError naming the choices otherwise.
RangeAllocation parse_range_allocation(std::string_view name);

class RangeAllocator {
 public:
  virtual ~RangeAllocator() = default;
  // The start of a free range holding at least `length` ids, or nullopt when none is free.
  // allocated_length(start) says how many it holds (more than `length` when the strategy rounds
  // up). UsageError for length < 1.
  virtual std::optional<int32_t> allocate(int32_t length) = 0;
  // Frees the range that allocate() returned starting at `start`; UsageError if there is none.
  virtual void free(int32_t start) = 0;
  virtual int32_t capacity() const = 0;
  // The longest range allocate() could return with nothing allocated.
  virtual int32_t max_allocation() const = 0;
  virtual int32_t num_free() const = 0;
  // The longest range one allocate() could return now (free ids outside it are external
  // fragmentation).
  virtual int32_t largest_free_run() const = 0;
  virtual int num_allocated() const = 0;
  // Length of the allocated range starting at `start`, or 0.
  virtual int32_t allocated_length(int32_t start) const = 0;
  // The strategy's structural invariants; throws InvariantError.
  virtual void check_invariants() const = 0;
};

// Manages ids [first, first + count) with the given strategy. ConfigError if count < 1 or first < 0.
std::unique_ptr<RangeAllocator> make_range_allocator(RangeAllocation strategy, int32_t first, int32_t count);

}  // namespace pagedkv
