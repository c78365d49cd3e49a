#include "pagedkv/scheduler/swap_space.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

SwapSpace::SwapSpace(int num_blocks)
    : num_blocks_(num_blocks), in_use_(static_cast<size_t>(std::max(num_blocks, 0)), false) {
  if (num_blocks < 0) throw ConfigError(fmt::format("swap space blocks must not be negative, got {}", num_blocks));
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(BlockId{i});  // hands out 0, 1, ... first
}

bool SwapSpace::allocate(int n, std::vector<BlockId>& out) {
  if (n > num_free()) return false;
  for (int i = 0; i < n; ++i) {
    BlockId b = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(b.value)] = true;
    out.push_back(b);
  }
  return true;
}

void SwapSpace::free(const std::vector<BlockId>& blocks) {
  for (BlockId b : blocks)
    if (b.value < 0 || b.value >= num_blocks_ || !in_use_[static_cast<size_t>(b.value)])
      throw UsageError(fmt::format("swap space: double free of host block {}", b.value));
  for (BlockId b : blocks) {
    in_use_[static_cast<size_t>(b.value)] = false;
    free_.push_back(b);
  }
}

}  // namespace pagedkv
