#include "pagedkv/block/range_allocator.h"

#include <fmt/format.h>

#include "pagedkv/block/buddy_allocator.h"
#include "pagedkv/block/contiguous_allocator.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

std::string_view range_allocation_name(RangeAllocation a) {
  return a == RangeAllocation::kBuddy ? "buddy" : "first-fit";
}

RangeAllocation parse_range_allocation(std::string_view name) {
  if (name == "first-fit") return RangeAllocation::kFirstFit;
  if (name == "buddy") return RangeAllocation::kBuddy;
  throw ConfigError(fmt::format("unknown range allocation '{}' (first-fit, buddy)", name));
}

std::unique_ptr<RangeAllocator> make_range_allocator(RangeAllocation strategy, int32_t first, int32_t count) {
  if (strategy == RangeAllocation::kBuddy) return std::make_unique<BuddyAllocator>(first, count);
  return std::make_unique<ContiguousAllocator>(first, count);
}

}  // namespace pagedkv
