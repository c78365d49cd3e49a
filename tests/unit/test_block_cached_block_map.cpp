// CachedBlockMap: the open-addressing index from block hash to the head of its chain of cached
// blocks. Tested against std::unordered_map, including keys that all land in one probe run
// (backward-shift deletion must keep every other key reachable).
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "pagedkv/block/cached_block_map.h"

namespace pagedkv {
namespace {

TEST(CoreCachedBlockMap, FindAssignEraseClear) {
  CachedBlockMap map(8);
  const BlockHash a{1, 2}, b{3, 4}, c{5, 6};
  EXPECT_EQ(map.find(a), -1);
  map.assign(a, 10);
  map.assign(b, 11);
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.find(a), 10);
  EXPECT_EQ(map.find(b), 11);
  EXPECT_EQ(map.find(c), -1);
  map.assign(a, 12);  // re-assigning moves the head, it does not add a key
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.find(a), 12);
  map.erase(c);  // absent: no-op
  EXPECT_EQ(map.size(), 2u);
  map.erase(a);
  EXPECT_EQ(map.find(a), -1);
  EXPECT_EQ(map.find(b), 11);
  EXPECT_EQ(map.size(), 1u);
  map.clear();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.find(b), -1);
}

TEST(CoreCachedBlockMap, KeysEqualInLoAreDistinguishedByHi) {
  CachedBlockMap map(4);
  map.assign(BlockHash{7, 1}, 1);
  map.assign(BlockHash{7, 2}, 2);
  EXPECT_EQ(map.find(BlockHash{7, 1}), 1);
  EXPECT_EQ(map.find(BlockHash{7, 2}), 2);
  EXPECT_EQ(map.find(BlockHash{7, 3}), -1);
}

// Every key in one home bucket (same lo, hi only above the folded bits): the worst probe run.
// Deleting from the front, middle and back of the run must keep the rest findable.
TEST(CoreCachedBlockMap, BackwardShiftKeepsOneProbeRunReachable) {
  CachedBlockMap map(16);  // 32 slots
  std::vector<BlockHash> keys;
  for (uint64_t i = 0; i < 12; ++i) keys.push_back(BlockHash{42, i << 40});  // hi>>7 still 0 mod 32
  for (size_t i = 0; i < keys.size(); ++i) map.assign(keys[i], static_cast<int32_t>(i));
  for (size_t victim : {0u, 5u, 11u, 6u}) {
    map.erase(keys[victim]);
    keys[victim] = BlockHash{};  // mark erased
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != BlockHash{}) {
        EXPECT_EQ(map.find(keys[i]), static_cast<int32_t>(i)) << "after erasing " << victim;
      }
  }
  EXPECT_EQ(map.size(), 8u);
}

// Random operations against std::unordered_map, with keys drawn from a small space of few
// home buckets so probe runs wrap around the end of the table.
TEST(CoreCachedBlockMap, MatchesUnorderedMapUnderRandomOperations) {
  constexpr size_t kMaxEntries = 64;  // 128 slots
  CachedBlockMap map(kMaxEntries);
  std::unordered_map<BlockHash, int32_t> model;
  std::mt19937_64 rng(777);
  auto random_key = [&] {
    // lo picks a bucket near the end of the table half the time (wrap-around runs).
    uint64_t lo = (rng() % 2) ? 120 + rng() % 8 : rng() % 8;
    return BlockHash{lo, (rng() % 16) << 32};
  };
  for (int step = 0; step < 200000; ++step) {
    BlockHash k = random_key();
    const auto op = rng() % 3;
    if (op == 0 && model.size() < kMaxEntries) {
      int32_t v = static_cast<int32_t>(rng() % 1000);
      map.assign(k, v);
      model[k] = v;
    } else if (op == 1) {
      map.erase(k);
      model.erase(k);
    } else {
      auto it = model.find(k);
      ASSERT_EQ(map.find(k), it == model.end() ? -1 : it->second) << "step " << step;
    }
    ASSERT_EQ(map.size(), model.size()) << "step " << step;
  }
  size_t visited = 0;
  map.for_each([&](const BlockHash& key, int32_t value) {
    ++visited;
    auto it = model.find(key);
    ASSERT_NE(it, model.end());
    EXPECT_EQ(it->second, value);
  });
  EXPECT_EQ(visited, model.size());
}

// The one-probe operations the pool uses agree with find/assign/erase.
TEST(CoreCachedBlockMap, FindOrInsertAndSlotAccess) {
  CachedBlockMap map(8);
  const BlockHash a{1, 2}, b{3, 4};
  EXPECT_EQ(map.find_or_insert(a, 10), -1) << "absent: inserted";
  EXPECT_EQ(map.find(a), 10);
  EXPECT_EQ(map.find_or_insert(a, 99), 10) << "present: the head is returned and kept";
  EXPECT_EQ(map.find(a), 10);
  EXPECT_EQ(map.size(), 1u);
  EXPECT_EQ(map.find_slot(b), CachedBlockMap::kAbsent);
  map.assign(b, 11);
  const size_t slot = map.find_slot(b);
  ASSERT_NE(slot, CachedBlockMap::kAbsent);
  EXPECT_EQ(map.head_at(slot), 11);
  map.set_head_at(slot, 12);
  EXPECT_EQ(map.find(b), 12);
  map.erase_at(map.find_slot(a));
  EXPECT_EQ(map.find(a), -1);
  EXPECT_EQ(map.find(b), 12);
  EXPECT_EQ(map.size(), 1u);
}

}  // namespace
}  // namespace pagedkv
