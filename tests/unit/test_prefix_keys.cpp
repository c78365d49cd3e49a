// What decides sharing beyond token ids (LoRA adapter, multimodal inputs with their offsets,
// the per-request cache salt), the selectable hash algorithm, and collision safety: with a hash
// function forced to return one constant, every block collides with every other, and still no
// request may get a block whose KV is not exactly what it would have computed itself.
// Every operation runs the checker.
#include <gtest/gtest.h>

#include <random>

#include "core_test_support.h"

namespace pagedkv {
namespace {

using testing::CheckedManager;
using testing::concat;
using testing::full_attention_config;
using testing::iota_tokens;

using Ids = std::vector<int32_t>;

// ---- extra keys through the manager ----------------------------------------------------------

TEST(CorePrefixKeys, DifferentLoraAdaptersNeverShare) {
  CheckedManager m(full_attention_config(32, 4));
  Request a(RequestId{1}, iota_tokens(13, 0));
  a.lora_id = 1;
  Request b(RequestId{2}, iota_tokens(13, 0));
  b.lora_id = 2;
  Request c(RequestId{3}, iota_tokens(13, 0));
  c.lora_id = 1;
  Request base(RequestId{4}, iota_tokens(13, 0));
  ASSERT_EQ(m.admit(a), 0);
  ASSERT_EQ(m.admit(b), 0) << "another adapter computes other KV";
  ASSERT_EQ(m.admit(base), 0) << "the base model is not adapter 1";
  ASSERT_EQ(m.admit(c), 12) << "the same adapter shares";
  const Ids ta = m.table(a), tc = m.table(c);
  EXPECT_EQ(Ids(tc.begin(), tc.begin() + 3), Ids(ta.begin(), ta.begin() + 3));
}

TEST(CorePrefixKeys, CacheSaltsIsolateTenants) {
  CheckedManager m(full_attention_config(64, 4));
  auto salted = [](uint64_t id, std::string salt) {
    Request r(RequestId{id}, iota_tokens(17, 0));
    r.cache_salt = std::move(salt);
    return r;
  };
  Request a = salted(1, "tenant-a");
  Request b = salted(2, "tenant-b");
  Request none = salted(3, "");
  Request a2 = salted(4, "tenant-a");
  ASSERT_EQ(m.admit(a), 0);
  ASSERT_EQ(m.admit(b), 0) << "different salts never share, not even the first block";
  ASSERT_EQ(m.admit(none), 0) << "an unsalted request does not see salted blocks";
  ASSERT_EQ(m.admit(a2), 16) << "the same salt shares";
  for (int32_t x : m.table(b))
    for (int32_t y : m.table(a)) EXPECT_NE(x, y);
  // The salt is mixed into block 0, and the chain carries it: no later block is shared either.
  Request b_tail(RequestId{5}, iota_tokens(17, 0));
  b_tail.cache_salt = "tenant-c";
  EXPECT_EQ(m.get_computed_blocks(b_tail).num_computed_tokens, 0);
}

TEST(CorePrefixKeys, MultimodalInputsShareOnlyTheSameInputAtTheSameOffset) {
  CheckedManager m(full_attention_config(64, 4));
  // 16 tokens; the image's 6 placeholder tokens (all equal) sit at positions 5..10 (blocks 1, 2).
  auto with_image = [](uint64_t id, BlockHash image, int32_t offset) {
    Request r(RequestId{id}, iota_tokens(17, 0));
    for (int i = 0; i < 6; ++i) r.tokens[static_cast<size_t>(offset + i)] = 32000;  // placeholder
    r.mm_inputs.push_back(MultiModalInput{image, offset, 6});
    return r;
  };
  Request cat = with_image(1, BlockHash{0xca7, 1}, 5);
  Request dog = with_image(2, BlockHash{0xd09, 1}, 5);
  Request cat_again = with_image(3, BlockHash{0xca7, 1}, 5);
  ASSERT_EQ(m.admit(cat), 0);
  ASSERT_EQ(m.admit(dog), 4) << "only block 0, before the image, is shared";
  ASSERT_EQ(m.admit(cat_again), 16) << "the same image shares everything";
  // The same tokens and image, declared one position later: a different prompt from block 1 on.
  Request cat_later(RequestId{4}, iota_tokens(17, 0));
  for (int i = 0; i < 6; ++i) cat_later.tokens[static_cast<size_t>(5 + i)] = 32000;
  cat_later.mm_inputs.push_back(MultiModalInput{BlockHash{0xca7, 1}, 6, 5});
  EXPECT_EQ(m.get_computed_blocks(cat_later).num_computed_tokens, 4);
}

TEST(CorePrefixKeys, HashAlgorithmIsSelectableAndBothWork) {
  for (auto alg : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256}) {
    auto c = full_attention_config(32, 4);
    c.hash_algorithm = alg;
    CheckedManager m(std::move(c));
    EXPECT_EQ(m->hasher().algorithm(), alg);
    Request a(RequestId{1}, iota_tokens(13, 0));
    Request b(RequestId{2}, iota_tokens(13, 0));
    ASSERT_EQ(m.admit(a), 0);
    ASSERT_EQ(m.admit(b), 12);
    BlockHasher reference(4, alg, 0);
    std::vector<BlockHash> hs;
    std::vector<uint64_t> ds;
    reference.extend(a.tokens, PrefixKeys{}, hs, ds);
    EXPECT_EQ(a.block_hashes, hs) << "the manager hashes with the configured algorithm";
  }
  // The seed is configuration: the same seed gives the same hashes, another seed other ones.
  auto seeded = [](uint64_t seed) {
    auto c = full_attention_config(16, 4);
    c.hash_seed = seed;
    KVCacheManager m(std::move(c));
    Request r(RequestId{1}, iota_tokens(8, 0));
    m.hash_request(r);
    return r.block_hashes;
  };
  EXPECT_EQ(seeded(5), seeded(5));
  EXPECT_NE(seeded(5), seeded(6));
}

// ---- collision safety --------------------------------------------------------------------------

// Every block, every parent and the root hash to the same value.
BlockHash constant_hash(std::span<const std::byte>, uint64_t) { return BlockHash{0x5eed, 0x5eed}; }

KVCacheManagerConfig colliding(int num_blocks, int block_size) {
  auto c = full_attention_config(num_blocks, block_size);
  c.hash_function = &constant_hash;
  return c;
}

TEST(CoreCollision, DifferentContentNeverHitsDespiteEqualHashes) {
  CheckedManager m(colliding(32, 4));
  Request a(RequestId{1}, iota_tokens(9, 0));
  Request b(RequestId{2}, iota_tokens(9, 100));
  ASSERT_EQ(m.admit(a), 0);
  ASSERT_EQ(m.admit(b), 0) << "equal hashes, different tokens: a collision, not a hit";
  for (int32_t x : m.table(b))
    for (int32_t y : m.table(a)) EXPECT_NE(x, y);
  EXPECT_EQ(b.block_hashes[0], a.block_hashes[0]) << "the hashes really do collide";
  Request a_twin(RequestId{3}, iota_tokens(9, 0));
  EXPECT_EQ(m.admit(a_twin), 8) << "equal content still hits";
}

// A's second block holds the same tokens as B's first block. With honest hashes their parents
// differ; here the parent hashes collide too, so only the structure of the chain can tell that
// A's block 1 holds KV computed after A's block 0, which B does not have.
TEST(CoreCollision, ABlockIsNeverSplicedOntoAnotherPrefix) {
  CheckedManager m(colliding(32, 4));
  const auto w = iota_tokens(4, 0), x = iota_tokens(4, 50);
  Request a(RequestId{1}, concat(concat(w, x), {9}));  // [W][X][9]
  ASSERT_EQ(m.admit(a), 0);
  Request b(RequestId{2}, concat(x, {1, 2}));  // [X][1 2]
  auto hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.num_computed_tokens, 0) << "B must not get A's block 1: its KV depends on A's block 0";
  ASSERT_TRUE(m.allocate_slots(b, b.num_tokens() - hit.num_computed_tokens, hit.num_computed_tokens, &hit).has_value());
  EXPECT_NE(m.table(b)[0], m.table(a)[1]);
}

TEST(CoreCollision, RepeatedContentMapsToItsOwnPosition) {
  CheckedManager m(colliding(32, 4));
  const auto x = iota_tokens(4, 50);
  Request a(RequestId{1}, concat(concat(x, x), {7}));  // [X][X][7]
  ASSERT_EQ(m.admit(a), 0);
  Request b(RequestId{2}, concat(concat(x, x), {8}));
  auto hit = m.get_computed_blocks(b);
  ASSERT_EQ(hit.num_computed_tokens, 8);
  EXPECT_EQ(testing::ids_of(hit.blocks[0]), (Ids{m.table(a)[0], m.table(a)[1]}))
      << "block 1 of B is A's block 1, not A's block 0 twice";
}

TEST(CoreCollision, TenantsStayIsolatedUnderCollisions) {
  CheckedManager m(colliding(64, 4));
  const auto v = iota_tokens(4, 0), w = iota_tokens(4, 100), x = iota_tokens(4, 50);
  Request a(RequestId{1}, concat(concat(w, x), {1}));  // tenant A: [W][X]
  a.cache_salt = "a";
  Request b_first(RequestId{2}, concat(v, {2}));  // tenant B caches [V]
  b_first.cache_salt = "b";
  ASSERT_EQ(m.admit(a), 0);
  ASSERT_EQ(m.admit(b_first), 0);
  Request b(RequestId{3}, concat(concat(v, x), {3}));  // tenant B: [V][X]
  b.cache_salt = "b";
  auto hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.num_computed_tokens, 4) << "B's own [V] only; [X] after [W] is tenant A's";
}

// The strongest form: the same random workload run with honest hashes and with colliding ones
// must make exactly the same decisions (hits, tables, free blocks) at every step.
TEST(CoreCollision, CollidingHashesChangeNoDecision) {
  CheckedManager honest(full_attention_config(40, 4));
  CheckedManager forced(colliding(40, 4));
  std::mt19937_64 rng(2024);
  std::vector<Request> live_h, live_f;
  uint64_t next_id = 1;
  for (int step = 0; step < 3000; ++step) {
    const auto op = rng() % 4;
    if (op < 2 || live_h.empty()) {
      // Prompts from a 3-letter alphabet of blocks, so equal blocks at different positions are common.
      std::vector<TokenId> prompt;
      const int blocks = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < blocks; ++i) {
        const TokenId letter = static_cast<TokenId>(rng() % 3);
        for (int j = 0; j < 4; ++j) prompt.push_back(letter * 10 + j);
      }
      for (int j = static_cast<int>(rng() % 4); j > 0; --j) prompt.push_back(static_cast<TokenId>(rng() % 3));
      Request rh(RequestId{next_id}, prompt), rf(RequestId{next_id}, prompt);
      ++next_id;
      auto hh = honest.admit(rh);
      auto hf = forced.admit(rf);
      ASSERT_EQ(hh, hf) << "step " << step;
      if (hh) {
        ASSERT_EQ(honest.table(rh), forced.table(rf)) << "step " << step;
        live_h.push_back(rh);
        live_f.push_back(rf);
      }
    } else if (op == 2) {
      const size_t k = rng() % live_h.size();
      const TokenId t = static_cast<TokenId>(rng() % 3);
      auto dh = honest.decode(live_h[k], t);
      auto df = forced.decode(live_f[k], t);
      ASSERT_EQ(dh.has_value(), df.has_value()) << "step " << step;
      ASSERT_EQ(honest.table(live_h[k]), forced.table(live_f[k])) << "step " << step;
    } else {
      const size_t k = rng() % live_h.size();
      honest.free(live_h[k]);
      forced.free(live_f[k]);
      live_h.erase(live_h.begin() + static_cast<ptrdiff_t>(k));
      live_f.erase(live_f.begin() + static_cast<ptrdiff_t>(k));
    }
    ASSERT_EQ(honest->num_free_blocks(), forced->num_free_blocks()) << "step " << step;
    ASSERT_EQ(honest->pool().num_cached_blocks(), forced->pool().num_cached_blocks()) << "step " << step;
  }
  EXPECT_EQ(honest->prefix_cache_stats().hits, forced->prefix_cache_stats().hits);
  EXPECT_GT(honest->prefix_cache_stats().hits, 0u);
}

}  // namespace
}  // namespace pagedkv
