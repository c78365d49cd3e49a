// fork and copy-on-write (parallel sampling, beam search): the child shares every block of the
// parent; the first write into a shared block gives the writer a fresh block and queues a
// (src, dst) copy for whoever owns the bytes. Every operation runs the checker.
#include <gtest/gtest.h>

#include "core_test_support.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

using testing::CheckedManager;
using testing::full_attention_config;
using testing::iota_tokens;

using Ids = std::vector<int32_t>;
using Copies = std::vector<std::pair<BlockId, BlockId>>;

// The caller's side of a fork: the child is the parent's request state under a new id.
Request child_of(const Request& parent, uint64_t id) {
  Request c = parent;
  c.id = RequestId{id};
  return c;
}

int ref(CheckedManager& m, int32_t block) { return m->pool().block(BlockId{block}).ref_cnt; }

TEST(CoreForkCow, TheChildSharesEveryBlock) {
  CheckedManager m(full_attention_config(16, 4));
  Request parent(RequestId{1}, iota_tokens(10, 0));  // 3 blocks, the last partial
  ASSERT_TRUE(m.admit(parent).has_value());
  Request child = child_of(parent, 2);
  const int free_before = m->num_free_blocks();
  m.fork(parent, child);
  EXPECT_EQ(m.table(child), m.table(parent));
  for (int32_t b : m.table(parent)) EXPECT_EQ(ref(m, b), 2);
  EXPECT_EQ(m->num_free_blocks(), free_before) << "a fork costs no memory";
  EXPECT_EQ(m->num_requests(), 2);
  EXPECT_FALSE(m->has_pending_copies());
}

TEST(CoreForkCow, ForkMisuseIsAUsageError) {
  CheckedManager m(full_attention_config(16, 4));
  Request parent(RequestId{1}, iota_tokens(6, 0));
  Request stranger(RequestId{9}, iota_tokens(6, 0));
  EXPECT_THROW(m->fork(stranger, parent), UsageError) << "the parent holds nothing";
  ASSERT_TRUE(m.admit(parent).has_value());
  Request child = child_of(parent, 2);
  m.fork(parent, child);
  EXPECT_THROW(m->fork(parent, child), UsageError) << "the child already holds blocks";
  m.check();
}

TEST(CoreForkCow, WritingIntoASharedPartialBlockCopiesItForTheWriter) {
  CheckedManager m(full_attention_config(16, 4));
  Request parent(RequestId{1}, iota_tokens(6, 0));  // [0-3] [4-5 partial]
  ASSERT_TRUE(m.admit(parent).has_value());
  Request child = child_of(parent, 2);
  m.fork(parent, child);
  const Ids shared = m.table(parent);

  // The child samples a token and writes slot 6, inside the shared partial block.
  auto got = m.decode(child, 100);
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->table_rewritten) << "an existing entry changed: the worker must re-read the row";
  EXPECT_TRUE(got->blocks[0].empty()) << "no block was appended";
  const Ids child_table = m.table(child);
  EXPECT_EQ(child_table[0], shared[0]) << "the full block stays shared";
  EXPECT_NE(child_table[1], shared[1]) << "the writer got a fresh block";
  EXPECT_EQ(ref(m, shared[0]), 2);
  EXPECT_EQ(ref(m, shared[1]), 1) << "the old block is now the parent's alone";
  EXPECT_EQ(ref(m, child_table[1]), 1);
  ASSERT_TRUE(m->has_pending_copies());
  const Copies copies = m->take_pending_copies();
  EXPECT_EQ(copies, (Copies{{BlockId{shared[1]}, BlockId{child_table[1]}}}))
      << "the bytes of the computed tokens 4-5 must be copied before the next forward pass";
  EXPECT_FALSE(m->has_pending_copies());
  EXPECT_TRUE(m->take_pending_copies().empty());

  // The parent now owns its block alone and writes in place.
  auto p = m.decode(parent, 200);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->table_rewritten);
  EXPECT_EQ(m.table(parent), shared);
  EXPECT_FALSE(m->has_pending_copies());
}

TEST(CoreForkCow, BeamSearchEveryWriterButTheLastGetsACopy) {
  CheckedManager m(full_attention_config(32, 4));
  Request parent(RequestId{1}, iota_tokens(5, 0));
  ASSERT_TRUE(m.admit(parent).has_value());
  std::vector<Request> beams;
  for (uint64_t i = 0; i < 3; ++i) {
    beams.push_back(child_of(parent, 10 + i));
    m.fork(parent, beams.back());
  }
  const int32_t shared_tail = m.table(parent)[1];
  EXPECT_EQ(ref(m, shared_tail), 4);
  for (size_t i = 0; i < beams.size(); ++i) ASSERT_TRUE(m.decode(beams[i], static_cast<TokenId>(100 + i)).has_value());
  ASSERT_TRUE(m.decode(parent, 99).has_value());
  const Copies copies = m->take_pending_copies();
  ASSERT_EQ(copies.size(), 3u);
  for (const auto& [src, dst] : copies) EXPECT_EQ(src.value, shared_tail);
  EXPECT_EQ(m.table(parent)[1], shared_tail) << "the last holder keeps the original";
  EXPECT_EQ(ref(m, shared_tail), 1);
  EXPECT_EQ(ref(m, m.table(parent)[0]), 4) << "the full head block is still shared by all four";
}

TEST(CoreForkCow, ForkAtABlockBoundaryNeedsNoCopy) {
  CheckedManager m(full_attention_config(16, 4));
  Request parent(RequestId{1}, iota_tokens(8, 0));  // two full blocks
  ASSERT_TRUE(m.admit(parent).has_value());
  Request child = child_of(parent, 2);
  m.fork(parent, child);
  auto got = m.decode(child, 7);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->table_rewritten);
  EXPECT_EQ(got->blocks[0].size(), 1u) << "the new token opens a new private block";
  EXPECT_FALSE(m->has_pending_copies());
}

TEST(CoreForkCow, ASharedBlockWithoutComputedTokensIsReplacedWithoutACopy) {
  CheckedManager m(full_attention_config(16, 4));
  Request parent(RequestId{1}, iota_tokens(4, 0));
  // Prefill of 4 tokens plus 4 lookahead slots: block 1 is allocated but holds nothing yet.
  ASSERT_TRUE(m.allocate_slots(parent, 4, 0, nullptr, /*num_lookahead_tokens=*/4).has_value());
  parent.num_computed_tokens = 4;
  Request child = child_of(parent, 2);
  m.fork(parent, child);
  const int32_t empty_block = m.table(parent)[1];
  auto got = m.decode(child, 5);
  ASSERT_TRUE(got.has_value());
  EXPECT_NE(m.table(child)[1], empty_block);
  EXPECT_FALSE(m->has_pending_copies()) << "nothing computed in the block: nothing to copy";
}

TEST(CoreForkCow, CopyOnWriteNeedsAFreeBlockAndFailsCleanlyWithout) {
  CheckedManager m(full_attention_config(4, 4));  // 3 usable
  Request parent(RequestId{1}, iota_tokens(6, 0));  // 2 blocks
  ASSERT_TRUE(m.admit(parent).has_value());
  Request filler(RequestId{2}, iota_tokens(3, 100));  // the last free block
  ASSERT_TRUE(m.admit(filler).has_value());
  Request child = child_of(parent, 3);
  m.fork(parent, child);
  EXPECT_EQ(m->get_num_blocks_to_allocate(child, 7), 1) << "one copy-on-write block";
  const Ids before = m.table(child);
  EXPECT_FALSE(m.decode(child, 9).has_value());
  EXPECT_EQ(m.table(child), before);
  EXPECT_FALSE(m->has_pending_copies());
  EXPECT_EQ(ref(m, before[1]), 2);
  // Once the filler leaves there is room.
  m.free(filler);
  ASSERT_TRUE(m.decode(child, 9).has_value());
  EXPECT_EQ(m->take_pending_copies().size(), 1u);
}

TEST(CoreForkCow, FreeingTheParentLeavesTheChildIntact) {
  CheckedManager m(full_attention_config(16, 4));
  Request parent(RequestId{1}, iota_tokens(10, 0));
  ASSERT_TRUE(m.admit(parent).has_value());
  Request child = child_of(parent, 2);
  m.fork(parent, child);
  const Ids table = m.table(child);
  m.free(parent);
  EXPECT_EQ(m.table(child), table);
  for (int32_t b : table) EXPECT_EQ(ref(m, b), 1);
  // The child now owns its partial block alone: its write needs no copy.
  ASSERT_TRUE(m.decode(child, 5).has_value());
  EXPECT_FALSE(m->has_pending_copies());
  m.free(child);
  EXPECT_EQ(m->num_free_blocks(), 15);
}

TEST(CoreForkCow, DivergedBranchesCacheTheirOwnBlocks) {
  CheckedManager m(full_attention_config(16, 4));
  Request parent(RequestId{1}, iota_tokens(6, 0));
  ASSERT_TRUE(m.admit(parent).has_value());
  Request child = child_of(parent, 2);
  m.fork(parent, child);
  // Both fill block 1 with different tokens: two cached blocks, one per branch.
  ASSERT_TRUE(m.decode(child, 70).has_value());
  ASSERT_TRUE(m.decode(child, 71).has_value());
  ASSERT_TRUE(m.decode(parent, 80).has_value());
  ASSERT_TRUE(m.decode(parent, 81).has_value());
  EXPECT_EQ(m->pool().num_cached_blocks(), 3);
  Request follow_child(RequestId{3}, {0, 1, 2, 3, 4, 5, 70, 71, 1});
  Request follow_parent(RequestId{4}, {0, 1, 2, 3, 4, 5, 80, 81, 1});
  auto hc = m.get_computed_blocks(follow_child);
  auto hp = m.get_computed_blocks(follow_parent);
  EXPECT_EQ(hc.num_computed_tokens, 8);
  EXPECT_EQ(hp.num_computed_tokens, 8);
  EXPECT_EQ(testing::ids_of(hc.blocks[0])[1], m.table(child)[1]);
  EXPECT_EQ(testing::ids_of(hp.blocks[0])[1], m.table(parent)[1]);
}

TEST(CoreForkCow, GrandchildrenShareTransitively) {
  CheckedManager m(full_attention_config(16, 4));
  Request a(RequestId{1}, iota_tokens(5, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  Request b = child_of(a, 2);
  m.fork(a, b);
  Request c = child_of(b, 3);
  m.fork(b, c);
  for (int32_t blk : m.table(a)) EXPECT_EQ(ref(m, blk), 3);
  m.free(b);
  for (int32_t blk : m.table(a)) EXPECT_EQ(ref(m, blk), 2);
  ASSERT_TRUE(m.decode(c, 1).has_value());
  ASSERT_TRUE(m.decode(a, 2).has_value());
  EXPECT_EQ(m->take_pending_copies().size(), 1u) << "only the first writer copies";
}

}  // namespace
}  // namespace pagedkv
