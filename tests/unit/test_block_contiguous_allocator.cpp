// ContiguousAllocator against a model: a bitmap searched first-fit. Random allocations and frees,
// the checker after every operation, and the same answers as the model every time.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <vector>

#include "pagedkv/block/contiguous_allocator.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

// The model: one bool per id; first fit scans from the lowest id.
struct BitmapModel {
  int32_t first;
  std::vector<bool> used;
  std::optional<int32_t> allocate(int32_t length) {
    int32_t run = 0;
    for (size_t i = 0; i < used.size(); ++i) {
      run = used[i] ? 0 : run + 1;
      if (run == length) {
        const size_t start = i + 1 - static_cast<size_t>(length);
        for (size_t k = start; k <= i; ++k) used[k] = true;
        return first + static_cast<int32_t>(start);
      }
    }
    return std::nullopt;
  }
  int32_t largest_free_run() const {
    int32_t best = 0, run = 0;
    for (bool u : used) {
      run = u ? 0 : run + 1;
      best = std::max(best, run);
    }
    return best;
  }
};

TEST(ContiguousAllocator, FirstFitCoalescesAndLeavesHoles) {
  ContiguousAllocator a(1, 10);
  EXPECT_EQ(a.allocate(3), 1);
  EXPECT_EQ(a.allocate(3), 4);
  EXPECT_EQ(a.allocate(3), 7);
  EXPECT_EQ(a.allocate(2), std::nullopt);  // one id left
  a.free(1);
  a.free(7);
  a.check_invariants();
  // Four free ids, but in runs of 3 and 4 (7..10): a 5 does not fit; that is external fragmentation.
  EXPECT_EQ(a.num_free(), 7);
  EXPECT_EQ(a.largest_free_run(), 4);
  EXPECT_EQ(a.allocate(5), std::nullopt);
  a.free(4);  // the middle range joins both neighbours
  a.check_invariants();
  EXPECT_EQ(a.largest_free_run(), 10);
  EXPECT_EQ(a.allocate(10), 1);
}

TEST(ContiguousAllocator, BadUseIsAnErrorAndChangesNothing) {
  EXPECT_THROW(ContiguousAllocator(0, 0), ConfigError);
  EXPECT_THROW(ContiguousAllocator(-1, 4), ConfigError);
  ContiguousAllocator a(5, 8);
  EXPECT_THROW(a.allocate(0), UsageError);
  const int32_t s = *a.allocate(4);
  EXPECT_THROW(a.free(s + 1), UsageError);  // not the start of a range
  a.free(s);
  EXPECT_THROW(a.free(s), UsageError);  // double free
  a.check_invariants();
  EXPECT_EQ(a.num_free(), 8);
}

TEST(ContiguousAllocator, MatchesAFirstFitBitmapUnderRandomUse) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::mt19937_64 rng(seed);
    const int32_t first = static_cast<int32_t>(rng() % 3);
    const int32_t count = 50 + static_cast<int32_t>(rng() % 200);
    ContiguousAllocator a(first, count);
    BitmapModel model{first, std::vector<bool>(static_cast<size_t>(count), false)};
    std::map<int32_t, int32_t> live;  // start -> length
    for (int op = 0; op < 2000; ++op) {
      if (live.empty() || rng() % 100 < 55) {
        const int32_t length = 1 + static_cast<int32_t>(rng() % 24);
        const std::optional<int32_t> got = a.allocate(length);
        ASSERT_EQ(got, model.allocate(length)) << "seed " << seed << " op " << op;
        if (got) live.emplace(*got, length);
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        a.free(it->first);
        for (int32_t k = 0; k < it->second; ++k) model.used[static_cast<size_t>(it->first - first + k)] = false;
        live.erase(it);
      }
      ASSERT_NO_THROW(a.check_invariants()) << "seed " << seed << " op " << op;
      ASSERT_EQ(a.largest_free_run(), model.largest_free_run());
      ASSERT_EQ(a.num_allocated(), static_cast<int>(live.size()));
      for (const auto& [start, length] : live) ASSERT_EQ(a.allocated_length(start), length);
    }
  }
}

}  // namespace
}  // namespace pagedkv
