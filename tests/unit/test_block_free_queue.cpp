// FreeBlockQueue: the intrusive LRU list of free blocks. Order is eviction order (front = least
// recently freed), every operation is O(1) and touches only the blocks it links.
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>
#include <vector>

#include "pagedkv/block/free_block_queue.h"

namespace pagedkv {
namespace {

std::vector<KVCacheBlock> make_blocks(int n) {
  std::vector<KVCacheBlock> blocks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) blocks[static_cast<size_t>(i)].id = BlockId{i};
  return blocks;
}

std::vector<int32_t> contents(const FreeBlockQueue& q) {
  std::vector<int32_t> out;
  q.for_each([&](const KVCacheBlock& b) { out.push_back(b.id.value); });
  return out;
}

// Walks the links both ways and checks that they agree with the expected order.
void expect_queue(const FreeBlockQueue& q, const std::vector<KVCacheBlock>& blocks, const std::vector<int32_t>& want) {
  ASSERT_EQ(q.size(), static_cast<int>(want.size()));
  EXPECT_EQ(q.empty(), want.empty());
  EXPECT_EQ(contents(q), want);
  std::vector<int32_t> backwards;
  for (int32_t i = q.back(); i != kNoLink; i = blocks[static_cast<size_t>(i)].prev_free) backwards.push_back(i);
  EXPECT_EQ(std::vector<int32_t>(backwards.rbegin(), backwards.rend()), want);
  EXPECT_EQ(q.front(), want.empty() ? kNoLink : want.front());
  EXPECT_EQ(q.back(), want.empty() ? kNoLink : want.back());
  for (const KVCacheBlock& b : blocks) {
    bool member = std::find(want.begin(), want.end(), b.id.value) != want.end();
    EXPECT_EQ(b.in_free_queue, member) << "block " << b.id.value;
    if (!member) {
      EXPECT_EQ(b.prev_free, kNoLink) << "unlinked block " << b.id.value << " keeps a link";
      EXPECT_EQ(b.next_free, kNoLink) << "unlinked block " << b.id.value << " keeps a link";
    }
  }
}

TEST(CoreFreeQueue, StartsEmpty) {
  auto blocks = make_blocks(4);
  FreeBlockQueue q(blocks);
  expect_queue(q, blocks, {});
}

TEST(CoreFreeQueue, PushBackKeepsArrivalOrderAndPopFrontTakesTheOldest) {
  auto blocks = make_blocks(6);
  FreeBlockQueue q(blocks);
  for (int i : {3, 1, 5, 2}) q.push_back(blocks[static_cast<size_t>(i)]);
  expect_queue(q, blocks, {3, 1, 5, 2});
  EXPECT_EQ(q.pop_front().id.value, 3);
  expect_queue(q, blocks, {1, 5, 2});
  EXPECT_EQ(q.pop_front().id.value, 1);
  EXPECT_EQ(q.pop_front().id.value, 5);
  EXPECT_EQ(q.pop_front().id.value, 2);
  expect_queue(q, blocks, {});
}

TEST(CoreFreeQueue, RemoveFromFrontMiddleAndBack) {
  auto blocks = make_blocks(6);
  FreeBlockQueue q(blocks);
  for (int i = 0; i < 6; ++i) q.push_back(blocks[static_cast<size_t>(i)]);
  q.remove(blocks[3]);  // middle
  expect_queue(q, blocks, {0, 1, 2, 4, 5});
  q.remove(blocks[0]);  // front
  expect_queue(q, blocks, {1, 2, 4, 5});
  q.remove(blocks[5]);  // back
  expect_queue(q, blocks, {1, 2, 4});
  q.remove(blocks[2]);
  q.remove(blocks[1]);
  q.remove(blocks[4]);  // the last one
  expect_queue(q, blocks, {});
  // A removed block can come back and goes to the back (most recently freed).
  q.push_back(blocks[3]);
  q.push_back(blocks[0]);
  expect_queue(q, blocks, {3, 0});
}

TEST(CoreFreeQueue, ReinsertedBlockMovesToTheBack) {
  // A cached block touched by a prefix hit leaves the queue; when freed again it is the most
  // recently used and must be evicted last.
  auto blocks = make_blocks(5);
  FreeBlockQueue q(blocks);
  for (int i = 0; i < 5; ++i) q.push_back(blocks[static_cast<size_t>(i)]);
  q.remove(blocks[1]);
  q.push_back(blocks[1]);
  expect_queue(q, blocks, {0, 2, 3, 4, 1});
}

// The queue against std::list under random operations (order and membership at every step).
TEST(CoreFreeQueue, MatchesStdListUnderRandomOperations) {
  constexpr int kBlocks = 64;
  auto blocks = make_blocks(kBlocks);
  FreeBlockQueue q(blocks);
  std::list<int32_t> model;
  std::vector<int32_t> outside;
  for (int i = 0; i < kBlocks; ++i) outside.push_back(i);
  std::mt19937_64 rng(12345);
  for (int step = 0; step < 20000; ++step) {
    const auto op = rng() % 3;
    if (op == 0 && !outside.empty()) {
      size_t k = rng() % outside.size();
      int32_t id = outside[k];
      outside.erase(outside.begin() + static_cast<ptrdiff_t>(k));
      q.push_back(blocks[static_cast<size_t>(id)]);
      model.push_back(id);
    } else if (op == 1 && !model.empty()) {
      EXPECT_EQ(q.pop_front().id.value, model.front());
      outside.push_back(model.front());
      model.pop_front();
    } else if (op == 2 && !model.empty()) {
      auto it = model.begin();
      std::advance(it, static_cast<ptrdiff_t>(rng() % model.size()));
      q.remove(blocks[static_cast<size_t>(*it)]);
      outside.push_back(*it);
      model.erase(it);
    }
    ASSERT_EQ(q.size(), static_cast<int>(model.size())) << "step " << step;
    if (step % 97 == 0) expect_queue(q, blocks, std::vector<int32_t>(model.begin(), model.end()));
  }
  expect_queue(q, blocks, std::vector<int32_t>(model.begin(), model.end()));
}

// O(1): each operation rewrites at most the links of the block itself and its two neighbours.
// Checked structurally (no timings in tests): snapshot the array, apply one operation, count
// the blocks whose links changed.
TEST(CoreFreeQueue, OperationsTouchAtMostThreeBlocks) {
  constexpr int kBlocks = 1000;
  auto blocks = make_blocks(kBlocks);
  FreeBlockQueue q(blocks);
  for (int i = 0; i < kBlocks; ++i) q.push_back(blocks[static_cast<size_t>(i)]);
  auto changed = [&](const std::vector<KVCacheBlock>& before) {
    int n = 0;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i].prev_free != before[i].prev_free || blocks[i].next_free != before[i].next_free ||
          blocks[i].in_free_queue != before[i].in_free_queue)
        ++n;
    return n;
  };
  auto before = blocks;
  q.remove(blocks[500]);
  EXPECT_LE(changed(before), 3);
  before = blocks;
  q.pop_front();
  EXPECT_LE(changed(before), 2);
  before = blocks;
  q.push_back(blocks[500]);
  EXPECT_LE(changed(before), 2);
}

}  // namespace
}  // namespace pagedkv
