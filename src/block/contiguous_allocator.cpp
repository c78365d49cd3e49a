#include "pagedkv/block/contiguous_allocator.h"

#include <fmt/format.h>

#include <algorithm>

#include "pagedkv/core/error.h"

namespace pagedkv {

ContiguousAllocator::ContiguousAllocator(int32_t first, int32_t count)
    : first_(first), count_(count), num_free_(count) {
  if (first < 0 || count < 1)
    throw ConfigError(fmt::format("contiguous allocator: need first >= 0 and count >= 1, got {} and {}", first, count));
  free_.emplace(first, count);
}

std::optional<int32_t> ContiguousAllocator::allocate(int32_t length) {
  if (length < 1) throw UsageError(fmt::format("contiguous allocator: length must be at least 1, got {}", length));
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < length) continue;
    const int32_t start = it->first;
    const int32_t rest = it->second - length;
    free_.erase(it);
    if (rest > 0) free_.emplace(start + length, rest);
    allocated_.emplace(start, length);
    num_free_ -= length;
    return start;
  }
  return std::nullopt;
}

void ContiguousAllocator::free(int32_t start) {
  auto a = allocated_.find(start);
  if (a == allocated_.end())
    throw UsageError(fmt::format("contiguous allocator: no allocated range starts at {}", start));
  int32_t begin = start;
  int32_t length = a->second;
  allocated_.erase(a);
  num_free_ += length;
  // Coalesce with the free range that ends where this one begins, and the one that starts where it ends.
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == begin + length) {
    length += next->second;
    free_.erase(next);
  }
  free_.emplace(begin, length);
}

int32_t ContiguousAllocator::largest_free_run() const {
  int32_t best = 0;
  for (const auto& [start, length] : free_) best = std::max(best, length);
  return best;
}

int32_t ContiguousAllocator::allocated_length(int32_t start) const {
  auto it = allocated_.find(start);
  return it == allocated_.end() ? 0 : it->second;
}

void ContiguousAllocator::check_invariants() const {
  // Walk both maps in address order: every id is covered exactly once.
  auto f = free_.begin();
  auto a = allocated_.begin();
  int32_t at = first_;
  int32_t free_total = 0;
  bool last_free = false;
  while (f != free_.end() || a != allocated_.end()) {
    const bool take_free = a == allocated_.end() || (f != free_.end() && f->first < a->first);
    const auto [start, length] = take_free ? *f : *a;
    if (start != at || length < 1)
      throw InvariantError(
          fmt::format("contiguous allocator: range [{}, +{}) where id {} was expected", start, length, at));
    if (take_free && last_free)
      throw InvariantError(fmt::format("contiguous allocator: free range at {} not coalesced", start));
    last_free = take_free;
    if (take_free) {
      free_total += length;
      ++f;
    } else {
      ++a;
    }
    at = start + length;
  }
  if (at != first_ + count_)
    throw InvariantError(fmt::format("contiguous allocator: ranges end at {}, not {}", at, first_ + count_));
  if (free_total != num_free_)
    throw InvariantError(
        fmt::format("contiguous allocator: free ranges hold {} ids, counter says {}", free_total, num_free_));
}

}  // namespace pagedkv
