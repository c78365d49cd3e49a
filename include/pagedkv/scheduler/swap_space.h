// Host-memory swap space: a fixed set of host block slots for requests preempted by swapping.
// Only bookkeeping; the bytes live in a host KVArena owned by the engine.
#pragma once

#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv {

class SwapSpace {
 public:
  explicit SwapSpace(int num_blocks);
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  // All or nothing: appends n host block ids to `out`, or returns false.
  bool allocate(int n, std::vector<BlockId>& out);
  void free(const std::vector<BlockId>& blocks);  // throws UsageError on double free

 private:
  int num_blocks_;
  std::vector<BlockId> free_;
  std::vector<bool> in_use_;
};

}  // namespace pagedkv
