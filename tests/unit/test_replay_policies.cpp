// Eviction policies behind the EvictionPolicy interface: each one's eviction order on a small
// pool, and all of them under a random replay with the pool's invariant checker.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <sstream>
#include <string>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/block/eviction_policies.h"
#include "pagedkv/core/error.h"
#include "pagedkv/replay/cache_replay.h"
#include "pagedkv/replay/trace_reader.h"

namespace pagedkv {
namespace {

constexpr int kBlockSize = 4;

// A pool of `usable` blocks driven the way the manager drives it.
class PoolDriver {
 public:
  PoolDriver(int usable, std::unique_ptr<EvictionPolicy> policy) : pool_(options(usable, std::move(policy))) {}

  // Allocates one block, caches content `c` in it, frees it. Returns the block.
  BlockId cache(int c) {
    std::vector<BlockId> got;
    EXPECT_TRUE(pool_.allocate(1, got));
    pool_.cache_block(got[0], key(c));
    pool_.free_blocks(got);
    pool_.check_invariants();
    return got[0];
  }
  // A prefix hit on content `c` (which must be cached): touch, count the hit, free.
  void hit(int c) {
    auto b = pool_.find_cached(key(c));
    ASSERT_TRUE(b) << "content " << c << " is not cached";
    pool_.touch(std::span<const BlockId>(&*b, 1));
    pool_.record_hit(*b);
    pool_.free_blocks(std::span<const BlockId>(&*b, 1));
    pool_.check_invariants();
  }
  bool cached(int c) const { return pool_.find_cached(key(c)).has_value(); }
  // Allocates `n` blocks and keeps them (evicting as the policy decides).
  void take(int n) {
    std::vector<BlockId> got;
    ASSERT_TRUE(pool_.allocate(n, got));
    held_.insert(held_.end(), got.begin(), got.end());
    pool_.check_invariants();
  }
  BlockPool& pool() { return pool_; }
  BlockContentKey key(int c) const {
    auto& tokens = tokens_[static_cast<size_t>(c) % tokens_.size()];
    tokens = {c, c, c, c};
    BlockContentKey k;
    k.hash = BlockHash{static_cast<uint64_t>(c) * 0x9E3779B97F4A7C15ull + 1, static_cast<uint64_t>(c)};
    k.tokens = tokens;
    return k;
  }

 private:
  static BlockPoolOptions options(int usable, std::unique_ptr<EvictionPolicy> policy) {
    BlockPoolOptions o;
    o.num_blocks = usable + 1;
    o.block_size = kBlockSize;
    o.policy = std::move(policy);
    return o;
  }
  BlockPool pool_;
  std::vector<BlockId> held_;
  mutable std::array<std::vector<TokenId>, 8> tokens_;  // keys' token storage (a few alive at once)
};

TEST(EvictionPolicies, FactoryNamesAndErrors) {
  EXPECT_EQ(make_eviction_policy("lru"), nullptr);  // the pool's built-in queue
  EXPECT_EQ(make_eviction_policy("lfu")->name(), "lfu");
  EXPECT_EQ(make_eviction_policy("s3fifo")->name(), "s3fifo");
  EXPECT_EQ(make_eviction_policy("length-aware")->name(), "length-aware");
  EXPECT_EQ(eviction_policy_names().size(), 4u);
  try {
    make_eviction_policy("mru");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'mru'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("s3fifo"), std::string::npos);
  }
  EXPECT_THROW(S3FifoPolicy(0.0), ConfigError);
}

TEST(LfuPolicy, EvictsFewestHitsThenOldest) {
  PoolDriver d(4, std::make_unique<LfuPolicy>());
  for (int c = 1; c <= 4; ++c) d.cache(c);  // A B C D, no hits
  d.hit(1);
  d.hit(1);
  d.hit(2);
  d.take(1);  // C: no hits, freed before D
  EXPECT_FALSE(d.cached(3));
  EXPECT_TRUE(d.cached(4));
  d.take(1);
  EXPECT_FALSE(d.cached(4));
  d.take(1);  // B (1 hit) before A (2 hits)
  EXPECT_FALSE(d.cached(2));
  EXPECT_TRUE(d.cached(1));
  EXPECT_EQ(d.pool().stats().evictions, 3u);
}

TEST(LfuPolicy, HandsOutEmptyBlocksFirst) {
  PoolDriver d(4, std::make_unique<LfuPolicy>());
  d.cache(1);
  d.take(3);  // three never-used blocks; content 1 survives
  EXPECT_TRUE(d.cached(1));
  EXPECT_EQ(d.pool().stats().evictions, 0u);
}

TEST(S3FifoPolicy, ProbationQueueFiltersOneHitWonders) {
  PoolDriver d(10, std::make_unique<S3FifoPolicy>(0.1));  // probation target: 1 block
  d.cache(100);
  d.hit(100);  // reused: goes to the main queue when freed
  for (int c = 1; c <= 9; ++c) d.cache(c);
  d.take(9);  // all nine never-reused blocks go before the reused one
  EXPECT_TRUE(d.cached(100));
  for (int c = 1; c <= 9; ++c) EXPECT_FALSE(d.cached(c)) << c;
  d.take(1);
  EXPECT_FALSE(d.cached(100));
}

TEST(S3FifoPolicy, GhostHitGoesToMain) {
  auto policy = std::make_unique<S3FifoPolicy>(0.25);
  S3FifoPolicy* s3 = policy.get();
  PoolDriver d(4, std::move(policy));  // probation target: 1 block
  d.cache(1);
  d.cache(2);
  d.cache(3);
  d.cache(4);
  d.cache(5);  // evicts 1 from probation; 1's hash becomes a ghost
  EXPECT_FALSE(d.cached(1));
  d.cache(1);  // recomputed soon after: straight to the main queue (evicts 2)
  EXPECT_EQ(s3->ghost_hits(), 1u);
  d.cache(6);  // evicts from probation (3), not the ghost-admitted 1
  d.cache(7);  // 4
  EXPECT_TRUE(d.cached(1));
  EXPECT_FALSE(d.cached(3));
  EXPECT_FALSE(d.cached(4));
}

TEST(LengthAwarePolicy, EvictsDeeperBlocksAmongEqualHits) {
  auto policy = std::make_unique<LengthAwarePolicy>();
  LengthAwarePolicy* la = policy.get();
  PoolDriver d(3, std::move(policy));
  // One request holds a shallow block (position 0, content 1) and a deep one (position 5,
  // content 2), caches both, and frees the shallow one first: LRU would evict it first.
  std::vector<BlockId> got;
  ASSERT_TRUE(d.pool().allocate(2, got));
  la->set_position(got[0], 0);
  la->set_position(got[1], 5);
  d.pool().cache_block(got[0], d.key(1));
  d.pool().cache_block(got[1], d.key(2));
  d.pool().free_blocks(got);
  d.take(1);  // the never-used block first
  EXPECT_TRUE(d.cached(1) && d.cached(2));
  d.take(1);  // then the deeper of the two
  EXPECT_TRUE(d.cached(1));
  EXPECT_FALSE(d.cached(2));
}

TEST(LengthAwarePolicy, FewerHitsStillComeFirst) {
  auto policy = std::make_unique<LengthAwarePolicy>();
  LengthAwarePolicy* la = policy.get();
  PoolDriver d(2, std::move(policy));
  const BlockId deep = d.cache(1);
  d.cache(2);
  la->set_position(deep, 9);  // content 1 is deep but hit once; content 2 is shallow, never hit
  d.hit(1);
  d.take(1);
  EXPECT_TRUE(d.cached(1));
  EXPECT_FALSE(d.cached(2));
}

// Every policy under a random prefix-sharing replay: pool invariants after each request, and
// with unbounded capacity (no eviction) all policies see the same hits.
Trace random_trace(int requests, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text;
  int next_id = 1000;
  for (int i = 0; i < requests; ++i) {
    const int system = static_cast<int>(rng() % 4);  // 4 shared heads of 1-3 blocks
    std::vector<int> ids;
    for (int k = 0; k <= system % 3; ++k) ids.push_back(system * 10 + k);
    const int extra = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < extra; ++k) ids.push_back(next_id++);
    const int len = static_cast<int>(ids.size() - 1) * 512 + 1 + static_cast<int>(rng() % 512);
    text += "{\"input_length\": " + std::to_string(len) + ", \"hash_ids\": [";
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k) text += ",";
      text += std::to_string(ids[k]);
    }
    text += "]}\n";
  }
  std::istringstream in(text);
  return read_mooncake_trace(in, "random");
}

TEST(EvictionPolicies, RandomReplayKeepsInvariants) {
  const Trace trace = random_trace(300, 7);
  for (std::string_view name : eviction_policy_names()) {
    CacheInstanceConfig c;
    c.block_size = 64;
    c.capacity_blocks = 60;  // a few requests' worth: constant eviction
    c.policy = std::string(name);
    c.max_prompt_tokens = max_prompt_tokens(trace);
    CacheInstance instance(c);
    Request r;
    int64_t hits = 0;
    for (size_t i = 0; i < trace.size(); ++i) {
      load_trace_request(trace, i, RequestId{i}, r);
      hits += instance.serve(r).hit_blocks;
      ASSERT_NO_THROW(instance.manager().check_invariants()) << name << " after request " << i;
    }
    EXPECT_GT(hits, 0) << name;
    EXPECT_GT(instance.evictions(), 0u) << name;
  }
}

TEST(EvictionPolicies, WithoutEvictionAllPoliciesAgree) {
  const Trace trace = random_trace(200, 11);
  CacheReplayConfig c;
  c.block_size = 32;
  c.capacity_blocks = kInfiniteCapacity;
  c.policy = "lru";
  const CacheReplayResult lru = replay_cache(trace, c);
  EXPECT_EQ(lru.evictions, 0);
  for (std::string_view name : eviction_policy_names()) {
    c.policy = std::string(name);
    const CacheReplayResult r = replay_cache(trace, c);
    EXPECT_EQ(r.hit_blocks, lru.hit_blocks) << name;
    EXPECT_EQ(r.evictions, 0) << name;
  }
}

}  // namespace
}  // namespace pagedkv
