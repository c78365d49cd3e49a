// BuddyAllocator against a bitmap model of the buddy system: a request for n ids succeeds exactly
// when some aligned power-of-two range >= n inside one segment is wholly free (full coalescing
// makes every such range allocatable), the range it returns is aligned, of that size, and free
// in the model. Random allocations and frees with the checker after every operation; freeing
// everything restores the initial segments.
#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "pagedkv/block/buddy_allocator.h"
#include "pagedkv/block/range_allocator.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

int order_for(int32_t length) { return std::bit_width(static_cast<uint32_t>(length - 1)); }

struct BuddyModel {
  int32_t count;
  std::vector<bool> used;
  // Segment orders: the pool cut into aligned powers of two, largest first.
  int segment_order(int32_t offset) const {
    int32_t start = 0;
    for (int o = 31; o >= 0; --o)
      if (count & (int32_t{1} << o)) {
        if (offset < start + (int32_t{1} << o)) return o;
        start += int32_t{1} << o;
      }
    return -1;
  }
  bool fits(int order) const {
    const int32_t len = int32_t{1} << order;
    for (int32_t off = 0; off + len <= count; off += len) {
      if (segment_order(off) < order) continue;
      bool all_free = true;
      for (int32_t i = off; i < off + len && all_free; ++i) all_free = !used[static_cast<size_t>(i)];
      if (all_free) return true;
    }
    return false;
  }
};

void run_random(int32_t first, int32_t count, uint32_t seed) {
  BuddyAllocator a(first, count);
  BuddyModel m{count, std::vector<bool>(static_cast<size_t>(count), false)};
  std::mt19937 rng(seed);
  std::map<int32_t, int32_t> live;  // start -> length held
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      const int32_t length = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(std::max(1, count / 3)));
      const int order = order_for(length);
      const bool expect = m.fits(order);
      const std::optional<int32_t> start = a.allocate(length);
      ASSERT_EQ(start.has_value(), expect) << "step " << step << " length " << length;
      if (start) {
        const int32_t off = *start - first, held = int32_t{1} << order;
        ASSERT_EQ(a.allocated_length(*start), held);
        ASSERT_EQ(off % held, 0) << "aligned";
        for (int32_t i = off; i < off + held; ++i) {
          ASSERT_FALSE(m.used[static_cast<size_t>(i)]) << "overlap at " << i;
          m.used[static_cast<size_t>(i)] = true;
        }
        live[*start] = held;
      }
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      a.free(it->first);
      for (int32_t i = it->first - first; i < it->first - first + it->second; ++i)
        m.used[static_cast<size_t>(i)] = false;
      live.erase(it);
    }
    a.check_invariants();
    int32_t used = 0;
    for (const auto& [s, l] : live) used += l;
    ASSERT_EQ(a.num_free(), count - used);
    ASSERT_EQ(a.num_allocated(), static_cast<int>(live.size()));
  }
  for (const auto& [s, l] : live) a.free(s);
  a.check_invariants();
  EXPECT_EQ(a.num_free(), count);
  EXPECT_EQ(a.largest_free_run(), a.max_allocation());
  EXPECT_EQ(a.max_allocation(), int32_t{1} << (std::bit_width(static_cast<uint32_t>(count)) - 1));
}

TEST(BuddyAllocator, MatchesTheModelOnAPowerOfTwoPool) { run_random(1, 64, 1); }
TEST(BuddyAllocator, MatchesTheModelOnAnUnevenPool) { run_random(1, 1023, 2); }
TEST(BuddyAllocator, MatchesTheModelOnAnotherUnevenPool) { run_random(5, 100, 3); }

TEST(BuddyAllocator, SplitsRoundsUpAndMergesBuddies) {
  BuddyAllocator a(1, 16);
  const auto x = a.allocate(3);  // 4 ids, from splitting 16 -> 8 + 4 + 4
  ASSERT_TRUE(x);
  EXPECT_EQ(*x, 1);
  EXPECT_EQ(a.allocated_length(*x), 4);
  EXPECT_EQ(a.largest_free_run(), 8);
  const auto y = a.allocate(1);  // splits the other 4 -> 2 + 1 + 1
  ASSERT_TRUE(y);
  EXPECT_EQ(*y, 5);
  EXPECT_EQ(a.num_free(), 11);
  EXPECT_FALSE(a.allocate(9));  // 16 needed, only 8 in one piece
  a.free(*x);
  a.free(*y);
  a.check_invariants();
  EXPECT_EQ(a.largest_free_run(), 16);  // everything merged back
  EXPECT_THROW(a.free(*x), UsageError);
  EXPECT_THROW(a.allocate(0), UsageError);
  EXPECT_THROW(BuddyAllocator(0, 0), ConfigError);
}

TEST(RangeAllocator, NamesAndFactory) {
  EXPECT_EQ(parse_range_allocation("buddy"), RangeAllocation::kBuddy);
  EXPECT_EQ(parse_range_allocation("first-fit"), RangeAllocation::kFirstFit);
  EXPECT_THROW(parse_range_allocation("best-fit"), ConfigError);
  EXPECT_EQ(range_allocation_name(RangeAllocation::kBuddy), "buddy");
  const auto ff = make_range_allocator(RangeAllocation::kFirstFit, 1, 10);
  EXPECT_EQ(ff->max_allocation(), 10);
  EXPECT_EQ(*ff->allocate(3), 1);
  EXPECT_EQ(ff->allocated_length(1), 3);  // first fit does not round
  const auto bd = make_range_allocator(RangeAllocation::kBuddy, 1, 10);
  EXPECT_EQ(bd->max_allocation(), 8);
  EXPECT_EQ(bd->allocated_length(*bd->allocate(3)), 4);
}

}  // namespace
}  // namespace pagedkv
