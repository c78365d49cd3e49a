#include "pagedkv/block/buddy_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "pagedkv/core/error.h"

namespace pagedkv {

BuddyAllocator::BuddyAllocator(int32_t first, int32_t count) : first_(first), count_(count), num_free_(count) {
  if (first < 0 || count < 1)
    throw ConfigError(fmt::format("buddy allocator: need first >= 0 and count >= 1, got {} and {}", first, count));
  const int max_order = std::bit_width(static_cast<uint32_t>(count)) - 1;
  free_.resize(static_cast<size_t>(max_order) + 1);
  int32_t offset = 0;
  for (int order = max_order; order >= 0; --order)
    if (count & (int32_t{1} << order)) {
      segments_.emplace_back(offset, order);
      free_[static_cast<size_t>(order)].insert(offset);
      offset += int32_t{1} << order;
    }
}

int BuddyAllocator::segment_order(int32_t offset) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), std::pair(offset, 64));
  return std::prev(it)->second;
}

std::optional<int32_t> BuddyAllocator::allocate(int32_t length) {
  if (length < 1) throw UsageError(fmt::format("buddy allocator: length must be at least 1, got {}", length));
  const int order = std::bit_width(static_cast<uint32_t>(length - 1));  // ceil(log2(length))
  for (size_t j = static_cast<size_t>(order); j < free_.size(); ++j) {
    if (free_[j].empty()) continue;
    const int32_t offset = *free_[j].begin();
    free_[j].erase(free_[j].begin());
    // Split down: the upper halves stay free.
    for (size_t k = j; k > static_cast<size_t>(order); --k) free_[k - 1].insert(offset + (int32_t{1} << (k - 1)));
    allocated_.emplace(offset, order);
    num_free_ -= int32_t{1} << order;
    return first_ + offset;
  }
  return std::nullopt;
}

void BuddyAllocator::free(int32_t start) {
  auto a = allocated_.find(start - first_);
  if (a == allocated_.end()) throw UsageError(fmt::format("buddy allocator: no allocated range starts at {}", start));
  int32_t offset = a->first;
  int order = a->second;
  allocated_.erase(a);
  num_free_ += int32_t{1} << order;
  const int top = segment_order(offset);
  while (order < top) {
    const int32_t buddy = offset ^ (int32_t{1} << order);
    auto b = free_[static_cast<size_t>(order)].find(buddy);
    if (b == free_[static_cast<size_t>(order)].end()) break;
    free_[static_cast<size_t>(order)].erase(b);
    offset = std::min(offset, buddy);
    ++order;
  }
  free_[static_cast<size_t>(order)].insert(offset);
}

int32_t BuddyAllocator::largest_free_run() const {
  for (size_t j = free_.size(); j-- > 0;)
    if (!free_[j].empty()) return int32_t{1} << j;
  return 0;
}

int32_t BuddyAllocator::allocated_length(int32_t start) const {
  auto a = allocated_.find(start - first_);
  return a == allocated_.end() ? 0 : int32_t{1} << a->second;
}

void BuddyAllocator::check_invariants() const {
  std::map<int32_t, int32_t> ranges;  // offset -> length, free and allocated
  int32_t free_total = 0;
  auto add = [&](int32_t offset, int order, const char* what) {
    const int32_t len = int32_t{1} << order;
    if (offset < 0 || offset + len > count_ || offset % len != 0 || order > segment_order(offset))
      throw InvariantError(
          fmt::format("buddy allocator: {} range at {} of order {} is misplaced", what, offset, order));
    if (!ranges.emplace(offset, len).second)
      throw InvariantError(fmt::format("buddy allocator: two ranges start at {}", offset));
  };
  for (size_t j = 0; j < free_.size(); ++j)
    for (int32_t offset : free_[j]) {
      add(offset, static_cast<int>(j), "free");
      free_total += int32_t{1} << j;
      const int32_t buddy = offset ^ (int32_t{1} << j);
      if (static_cast<int>(j) < segment_order(offset) && free_[j].contains(buddy))
        throw InvariantError(
            fmt::format("buddy allocator: free buddies at {} and {} of order {} did not merge", offset, buddy, j));
    }
  for (const auto& [offset, order] : allocated_) add(offset, order, "allocated");
  int32_t next = 0;
  for (const auto& [offset, len] : ranges) {
    if (offset != next) throw InvariantError(fmt::format("buddy allocator: ids {}..{} are in no range", next, offset));
    next = offset + len;
  }
  if (next != count_)
    throw InvariantError(fmt::format("buddy allocator: ranges end at {}, the pool at {}", next, count_));
  if (free_total != num_free_)
    throw InvariantError(
        fmt::format("buddy allocator: free ranges hold {} ids, num_free() says {}", free_total, num_free_));
}

}  // namespace pagedkv
