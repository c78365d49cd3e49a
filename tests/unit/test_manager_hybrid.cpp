// Hybrid models (full-attention and sliding-window groups in one pool): the prefix hits the
// manager finds against a brute-force oracle of valid hits, the retention policy on a
// multi-session round-robin workload (vllm#48435) against the full-attention-only twin, and
// the window search's cost. Every manager operation runs the invariant checker.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core_test_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/memory/hybrid_model.h"
#include "pagedkv/workload/hybrid_sessions.h"

namespace pagedkv {
namespace {

using testing::CheckedManager;
using testing::concat;
using testing::iota_tokens;

KVCacheGroupSpec group(AttentionKind kind, int block_size, int window = 0) {
  KVCacheGroupSpec g;
  g.spec.kind = kind;
  g.spec.block_size = block_size;
  g.spec.sliding_window = window;
  return g;
}

// Group g's block i of r: hash blocks [i * k, (i + 1) * k) of the request's hashes (computed at
// the smallest block size), k the group's block size over it. Written out here from the
// definition rather than through the manager's helper.
BlockContentKey key_of(const KVCacheManager& m, const Request& r, int g, int i, int32_t parent_block) {
  const int bs = m.group_block_size(g);
  const int k = bs / m.block_size();
  BlockContentKey key;
  key.hash = r.block_hashes[static_cast<size_t>((i + 1) * k - 1)];
  key.parent = i == 0 ? m.hasher().root() : r.block_hashes[static_cast<size_t>(i * k - 1)];
  key.tokens = std::span<const TokenId>(r.tokens).subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
  key.extra_digest = 0;  // the oracle's requests carry no extra keys (checked in oracle())
  key.group = static_cast<uint16_t>(g);
  key.parent_block = parent_block;
  return key;
}

// The oracle: L (a multiple of every group's block size, at most n - 1 tokens) is a hit iff
// every full group has its blocks [0, L) cached as one chain and every sliding group has cached
// the blocks that hold tokens [L - w + 1, L). Returns the longest such L and, per group, the
// blocks (of that group's size) a hit at L takes.
struct OracleHit {
  int tokens = 0;
  std::vector<std::vector<BlockId>> blocks;
};

OracleHit oracle(KVCacheManager& m, Request& r) {
  m.hash_request(r);
  for (uint64_t d : r.block_extra_digests) EXPECT_EQ(d, 0u);
  const int groups = m.num_groups();
  int step = 1;
  for (int g = 0; g < groups; ++g) step = std::lcm(step, m.group_block_size(g));
  const int max_tokens = std::min(r.num_tokens() - 1, static_cast<int>(r.block_hashes.size()) * m.block_size());
  // Brute force per group: the full chain from block 0, or each block on its own (sliding).
  std::vector<std::vector<std::optional<BlockId>>> cached(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    const KVCacheSpec& spec = m.cache_config().groups[static_cast<size_t>(g)].spec;
    auto& c = cached[static_cast<size_t>(g)];
    int32_t parent = kNoLink;
    bool chain = true;
    for (int i = 0; i < max_tokens / spec.block_size; ++i) {
      if (spec.kind == AttentionKind::kFull) {
        std::optional<BlockId> hit = chain ? m.pool().find_cached(key_of(m, r, g, i, parent)) : std::nullopt;
        chain = hit.has_value();
        if (hit) parent = hit->value;
        c.push_back(hit);
      } else {
        c.push_back(m.pool().find_cached(key_of(m, r, g, i, kUnknownParent)));
      }
    }
  }
  OracleHit best;
  for (int L = 0; L <= max_tokens; L += step) {
    bool valid = true;
    std::vector<std::vector<BlockId>> blocks(static_cast<size_t>(groups));
    for (int g = 0; g < groups && valid; ++g) {
      const KVCacheSpec& spec = m.cache_config().groups[static_cast<size_t>(g)].spec;
      const int bs = spec.block_size;
      const auto& c = cached[static_cast<size_t>(g)];
      auto& b = blocks[static_cast<size_t>(g)];
      const int first_needed = spec.kind == AttentionKind::kFull ? 0 : std::max(0, L - spec.sliding_window + 1) / bs;
      for (int i = 0; i < L / bs; ++i) {
        if (i < first_needed) {
          b.push_back(m.pool().null_block());
        } else if (c[static_cast<size_t>(i)]) {
          b.push_back(*c[static_cast<size_t>(i)]);
        } else {
          valid = false;
          break;
        }
      }
    }
    if (valid) best = OracleHit{L, std::move(blocks)};
  }
  return best;
}

struct Live {
  std::unique_ptr<Request> r;
};

struct OracleRun {
  int nonzero = 0;  // lookups that hit something (the test must not pass on empty caches alone)
  bool mixed = false;  // the pool's groups had different block sizes
};

OracleRun run_oracle_seed(uint64_t seed, int max_groups = 3) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // Half the pools have one block size (1 to 16); the others give each group the base block
  // size times 1, 2 or 4 (vLLM's hybrid allocator scales block sizes so pages match).
  const int base = std::array{1, 2, 4, 8, 16}[static_cast<size_t>(pick(0, 4))];
  const bool mixed_sizes = pick(0, 1) == 1 && base <= 8;
  KVCacheManagerConfig c;
  c.watermark = 0.0;
  const int num_groups = pick(1, max_groups);
  int largest = base, lcm = 1;
  for (int g = 0; g < num_groups; ++g) {
    const int bs = mixed_sizes ? base * std::array{1, 2, 4}[static_cast<size_t>(pick(0, 2))] : base;
    largest = std::max(largest, bs);
    lcm = std::lcm(lcm, bs);
    if (g == 0 && pick(0, 9) < 7) c.cache.groups.push_back(group(AttentionKind::kFull, bs));
    else c.cache.groups.push_back(group(AttentionKind::kSlidingWindow, bs, pick(1, 6 * bs)));
  }
  c.cache.num_blocks = pick(6, 24) * std::max(1, 16 / base) * std::max(1, num_groups / 2);
  c.sliding_window_retention = pick(0, 3) != 0;
  c.sliding_window_checkpoint_interval = pick(0, 1) ? lcm * pick(1, 6) : 0;
  c.max_model_len = 40 * largest;
  OracleRun run;
  run.mixed = c.cache.max_block_size() != c.cache.block_size();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", base block " << base << ", largest " << largest << ", "
                                    << num_groups << " groups, " << c.cache.num_blocks << " blocks, retention "
                                    << c.sliding_window_retention);
  CheckedManager m(std::move(c));
  EXPECT_EQ(m->hit_alignment(), lcm);
  // A few documents; requests take a prefix of one and add their own tail (small vocabulary:
  // equal blocks after different prefixes exist and must not be confused).
  std::vector<std::vector<TokenId>> docs;
  for (int d = 0; d < 3; ++d) {
    std::vector<TokenId> t;
    for (int i = 0; i < 30 * largest; ++i) t.push_back(static_cast<TokenId>(pick(0, 3)));
    docs.push_back(std::move(t));
  }
  std::vector<Live> live;
  uint64_t next_id = 1;
  int checked = 0;
  for (int op = 0; op < 160; ++op) {
    const int kind = pick(0, 9);
    if (kind < 4 && live.size() < 4) {
      const auto& doc = docs[static_cast<size_t>(pick(0, 2))];
      std::vector<TokenId> prompt(doc.begin(), doc.begin() + pick(1, 24 * largest));
      for (int i = pick(0, 2 * largest); i > 0; --i) prompt.push_back(static_cast<TokenId>(pick(0, 3)));
      auto r = std::make_unique<Request>(RequestId{next_id++}, std::move(prompt));
      const OracleHit want = oracle(m.raw(), *r);
      ComputedBlocks hit = m.get_computed_blocks(*r);
      EXPECT_EQ(hit.num_computed_tokens, want.tokens) << "op " << op;
      if (hit.num_computed_tokens != want.tokens) return run;
      for (int g = 0; g < m->num_groups(); ++g)
        EXPECT_EQ(testing::ids_of(hit.blocks[static_cast<size_t>(g)]),
                  testing::ids_of(want.blocks[static_cast<size_t>(g)]))
            << "op " << op << " group " << g;
      ++checked;
      if (want.tokens > 0) ++run.nonzero;
      const int rest = r->num_tokens() - hit.num_computed_tokens;
      const int chunk = pick(0, 1) ? rest : std::min(rest, pick(1, 3 * largest));
      if (m.allocate_slots(*r, chunk, hit.num_computed_tokens, &hit)) {
        r->num_computed_tokens = hit.num_computed_tokens + chunk;
        live.push_back(Live{std::move(r)});
      }
    } else if (kind < 8 && !live.empty()) {
      Request& r = *live[static_cast<size_t>(pick(0, static_cast<int>(live.size()) - 1))].r;
      if (r.num_computed_tokens < r.num_prompt_tokens) {
        const int chunk = std::min(r.num_prompt_tokens - r.num_computed_tokens, pick(1, 3 * largest));
        if (m.allocate_slots(r, chunk)) r.num_computed_tokens += chunk;
      } else if (r.num_tokens() + 1 < m->max_model_len()) {
        m.decode(r, static_cast<TokenId>(pick(0, 3)));
      }
    } else if (!live.empty()) {
      const size_t i = static_cast<size_t>(pick(0, static_cast<int>(live.size()) - 1));
      m.free(*live[i].r);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  EXPECT_GT(checked, 10);
  return run;
}

TEST(CoreHybrid, HitsMatchABruteForceOracleOnRandomPools) {
  int nonzero = 0, mixed_nonzero = 0, mixed_pools = 0;
  for (uint64_t seed = 1; seed <= 120 && !HasFailure(); ++seed) {
    const OracleRun run = run_oracle_seed(seed);
    nonzero += run.nonzero;
    if (run.mixed) {
      ++mixed_pools;
      mixed_nonzero += run.nonzero;
    }
  }
  EXPECT_GT(nonzero, 600) << "lookups that hit something, over all seeds";
  EXPECT_GT(mixed_pools, 25) << "pools whose groups have different block sizes";
  EXPECT_GT(mixed_nonzero, 150) << "lookups that hit something in pools of mixed block sizes";
}

// Gemma 3's grouping makes 7 groups: pools of up to 7 groups (mixed block sizes among them).
TEST(CoreHybrid, HitsMatchTheOracleWithSevenGroups) {
  int nonzero = 0;
  for (uint64_t seed = 1000; seed < 1030 && !HasFailure(); ++seed) nonzero += run_oracle_seed(seed, 7).nonzero;
  EXPECT_GT(nonzero, 100);
}

// The oracle is not vacuous: a known layout hits where, and only where, it should.
TEST(CoreHybrid, OracleAndManagerAgreeOnAKnownLayout) {
  KVCacheManagerConfig c;
  c.watermark = 0;
  c.cache.num_blocks = 64;
  c.cache.groups = {group(AttentionKind::kFull, 4), group(AttentionKind::kSlidingWindow, 4, 6)};
  CheckedManager m(std::move(c));
  Request a(RequestId{1}, iota_tokens(30, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  m.free(a);
  Request b(RequestId{2}, concat(iota_tokens(30, 0), {1, 2}));
  const OracleHit want = oracle(m.raw(), b);
  EXPECT_EQ(want.tokens, 28) << "A's sequence end (28) is a checkpoint";
  EXPECT_EQ(m.get_computed_blocks(b).num_computed_tokens, 28);
  // A request that diverges at token 17 could hit at 16 in the full group, but A kept no
  // sliding window before 16 (not a reachable point of A): the sliding group limits the hit.
  Request d(RequestId{3}, concat(iota_tokens(17, 0), {99, 98, 97}));
  const OracleHit want_d = oracle(m.raw(), d);
  ComputedBlocks got_d = m.get_computed_blocks(d);
  EXPECT_EQ(got_d.num_computed_tokens, want_d.tokens);
  EXPECT_EQ(got_d.group_hit_tokens[0], 16);
  EXPECT_EQ(got_d.num_computed_tokens, 0);
  EXPECT_EQ(got_d.limiting_group, 1);
  EXPECT_EQ(m->prefix_cache_stats().limited_by_group[1], 1u);
}

TEST(CoreHybrid, AnEditInsideThePromptsLastBlockStillHits) {
  // Block 16, window 40: a 96-token prompt (its last block is tokens 80..95) and a 100-token
  // one (last block 96..99). A second request that changes a token inside that last block hits
  // up to the block's start, exactly as with full attention only.
  for (const int prompt_len : {96, 100}) {
    for (const bool hybrid : {true, false}) {
      SCOPED_TRACE(::testing::Message() << prompt_len << " tokens, " << (hybrid ? "hybrid" : "full twin"));
      KVCacheManagerConfig c;
      c.watermark = 0;
      c.cache.num_blocks = 64;
      c.cache.groups = {group(AttentionKind::kFull, 16), group(AttentionKind::kSlidingWindow, 16, 40)};
      if (!hybrid) c.cache.groups = full_attention_twin(c.cache.groups);
      CheckedManager m(std::move(c));
      Request a(RequestId{1}, iota_tokens(prompt_len, 1000));
      ASSERT_TRUE(m.admit(a).has_value());
      for (int t = 0; t < 70; ++t)
        ASSERT_TRUE(m.decode(a, 5000 + t).has_value());  // the window moves far past the prompt
      m.free(a);
      std::vector<TokenId> edited = iota_tokens(prompt_len, 1000);
      const int last_block_start = (prompt_len - 1) / 16 * 16;
      edited[static_cast<size_t>(prompt_len - 2)] = 7;  // inside the last block
      Request b(RequestId{2}, edited);
      EXPECT_EQ(m.get_computed_blocks(b).num_computed_tokens, last_block_start);
      Request same(RequestId{3}, iota_tokens(prompt_len, 1000));  // the same prompt again
      EXPECT_EQ(m.get_computed_blocks(same).num_computed_tokens, last_block_start);
    }
  }
}

TEST(CoreHybrid, ASharedPrefixBecomesACheckpointAfterOneMiss) {
  // Three prompts share a 100-token system prompt (block 16, window 40). A's prompt end is its
  // only checkpoint, so B's sliding group finds no window at 96 and B hits nothing; but B's
  // full group confirmed 96 tokens, so B keeps the window before 96 as a checkpoint and C hits.
  KVCacheManagerConfig c;
  c.watermark = 0;
  c.cache.num_blocks = 64;
  c.cache.groups = {group(AttentionKind::kFull, 16), group(AttentionKind::kSlidingWindow, 16, 40)};
  CheckedManager m(std::move(c));
  const std::vector<TokenId> system = iota_tokens(100, 1000);
  Request a(RequestId{1}, concat(system, iota_tokens(60, 1)));
  ASSERT_EQ(m.admit(a), 0);
  m.free(a);
  Request b(RequestId{2}, concat(system, iota_tokens(60, 2000)));
  ComputedBlocks hb = m.get_computed_blocks(b);
  EXPECT_EQ(hb.group_hit_tokens[0], 96);
  EXPECT_EQ(hb.num_computed_tokens, 0);
  EXPECT_EQ(hb.limiting_group, 1);
  ASSERT_TRUE(m.allocate_slots(b, b.num_tokens(), 0, &hb).has_value());
  b.num_computed_tokens = b.num_tokens();
  m.free(b);
  Request d(RequestId{3}, concat(system, iota_tokens(60, 3000)));
  EXPECT_EQ(m.get_computed_blocks(d).num_computed_tokens, 96);
}

TEST(CoreHybrid, WindowSearchSkipsAWholeWindowPerMiss) {
  // 4096 tokens, block 16, window 1024: 255 blocks to search, 64 per window. Nothing cached:
  // one probe per window, not one per block.
  KVCacheManagerConfig c;
  c.watermark = 0;
  c.cache.num_blocks = 600;
  c.cache.groups = {group(AttentionKind::kSlidingWindow, 16, 1025)};
  CheckedManager m(std::move(c));
  Request r(RequestId{1}, iota_tokens(4096, 0));
  EXPECT_EQ(m.get_computed_blocks(r).num_computed_tokens, 0);
  const uint64_t probes = m->prefix_cache_stats().window_search_probes;
  EXPECT_LE(probes, 255u / 64 + 1);
  EXPECT_GE(probes, 255u / 64);
  // Cached prefix of 2000 tokens (125 blocks; A's end window): the hit at 2000 costs a skip
  // per window above it plus about one window's probes.
  Request a(RequestId{2}, iota_tokens(2000, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  m.free(a);
  Request b(RequestId{3}, iota_tokens(4096, 0));
  EXPECT_EQ(m.get_computed_blocks(b).num_computed_tokens, 2000);
  const uint64_t probes_b = m->prefix_cache_stats().window_search_probes - probes;
  EXPECT_LE(probes_b, 255u / 64 + 2 * 4 + 64) << "O(blocks / window + window)";
}

TEST(CoreHybrid, AdmissionCountsEachGroupsRealFootprint) {
  // 4-token blocks, window 8, prefill chunks of 8: a 60-token prompt holds 15 full-attention
  // blocks but only cdiv(min(7 + 8, max_len), 4) + 1 = 5 sliding ones at once.
  KVCacheManagerConfig c;
  c.watermark = 0;
  c.cache.num_blocks = 21;  // 20 usable
  c.max_model_len = 256;
  c.max_num_batched_tokens = 8;
  c.cache.groups = {group(AttentionKind::kFull, 4), group(AttentionKind::kSlidingWindow, 4, 8)};
  CheckedManager m(std::move(c));
  Request r(RequestId{1}, iota_tokens(60, 0));
  EXPECT_EQ(m.can_allocate(r), AllocStatus::kOk) << "15 + 5 blocks fit in 20";
  // Chunked prefill through the whole prompt never needs more than that.
  int done = 0;
  while (done < 60) {
    const int chunk = std::min(8, 60 - done);
    ASSERT_TRUE(m.allocate_slots(r, chunk).has_value()) << "at " << done;
    done += chunk;
    r.num_computed_tokens = done;
    EXPECT_LE(m->pool().num_usable_blocks() - m->num_free_blocks(), 20);
  }
  Request longer(RequestId{2}, iota_tokens(68, 500));  // 17 + 5 > 20
  EXPECT_EQ(m.can_allocate(longer), AllocStatus::kNever);
  // Without chunking the whole prompt is allocated at once in both groups.
  KVCacheManagerConfig whole;
  whole.watermark = 0;
  whole.cache.num_blocks = 21;
  whole.max_model_len = 256;
  whole.cache.groups = {group(AttentionKind::kFull, 4), group(AttentionKind::kSlidingWindow, 4, 8)};
  CheckedManager w(std::move(whole));
  EXPECT_EQ(w.can_allocate(r), AllocStatus::kNever);
}

TEST(CoreHybrid, SkippedBlocksAreFreedBeforeTheCapacityCheck) {
  // A pool with exactly one free block after a 16-token prompt whose window has moved on: the
  // next chunk needs two new blocks, which fit only once the out-of-window blocks are released.
  KVCacheManagerConfig c;
  c.watermark = 0;
  c.cache.num_blocks = 6;  // 5 usable
  c.max_model_len = 64;
  c.cache.groups = {group(AttentionKind::kSlidingWindow, 4, 4)};
  CheckedManager m(std::move(c));
  Request r(RequestId{1}, iota_tokens(24, 0));
  ASSERT_TRUE(m.allocate_slots(r, 16).has_value());  // 4 blocks, 1 free
  r.num_computed_tokens = 16;
  // Tokens 16..23 attend back to 13: blocks 0..2 are released first, then 2 allocated.
  ASSERT_TRUE(m.allocate_slots(r, 8).has_value());
  EXPECT_EQ(m.table(r), (std::vector<int32_t>{0, 0, 0, m.table(r)[3], m.table(r)[4], m.table(r)[5]}));
}

HybridSessionsConfig sessions_config(int num_blocks, bool retention) {
  HybridSessionsConfig c;
  c.sessions = 12;
  c.turns = 5;
  c.system_prompt_tokens = 300;  // shared by every session: reachable through interval checkpoints
  c.checkpoint_interval = 128;
  c.user_tokens = 64;
  c.output_tokens = 32;
  c.concurrency = 4;
  c.num_blocks = num_blocks;
  c.retention = retention;
  c.check_invariants = true;
  return c;
}

std::vector<KVCacheGroupSpec> gemma_like() {
  return {group(AttentionKind::kFull, 16), group(AttentionKind::kSlidingWindow, 16, 128)};
}

TEST(CoreHybrid, RoundRobinSessionsHitAsMuchAsTheFullAttentionTwin) {
  // vllm#48435's shape: many sessions take turns; each turn's prompt is the session's whole
  // conversation. The twin's working set is under half the pool.
  for (const int interval : {128, 0}) {
    SCOPED_TRACE(::testing::Message() << "checkpoints every " << interval << " tokens");
    HybridSessionsConfig c = sessions_config(2400, true);
    c.checkpoint_interval = interval;
    const HybridSessionsResult twin = run_hybrid_sessions(c, full_attention_twin(gemma_like()));
    const HybridSessionsResult hybrid = run_hybrid_sessions(c, gemma_like());
    ASSERT_LT(twin.full_working_set_blocks * 2, c.num_blocks) << "the scenario's premise";
    EXPECT_EQ(hybrid.prompt_tokens, twin.prompt_tokens);
    EXPECT_GT(twin.hit_tokens, twin.prompt_tokens / 2) << "the twin reuses most of every conversation";
    EXPECT_GE(static_cast<double>(hybrid.hit_tokens), 0.95 * static_cast<double>(twin.hit_tokens))
        << "hybrid " << hybrid.hit_tokens << " vs twin " << twin.hit_tokens;
    EXPECT_LT(hybrid.peak_blocks_in_use, twin.peak_blocks_in_use) << "the sliding group holds only its window";
    EXPECT_GT(hybrid.pool.window_blocks_slid_out, 0u);
    EXPECT_GT(hybrid.pool.window_checkpoints_retained, 0u);
  }
}

TEST(CoreHybrid, UnderPressureRetentionKeepsMoreHitsThanCachingEveryWindowBlock) {
  // The round robin at pools the twin's working set overflows: the hybrid model needs fewer
  // blocks and keeps more hits than the twin, with retention at least as many as without.
  for (const int blocks : {600, 450, 350}) {
    SCOPED_TRACE(::testing::Message() << blocks << " blocks");
    const HybridSessionsResult twin =
        run_hybrid_sessions(sessions_config(blocks, true), full_attention_twin(gemma_like()));
    const HybridSessionsResult with = run_hybrid_sessions(sessions_config(blocks, true), gemma_like());
    const HybridSessionsResult without = run_hybrid_sessions(sessions_config(blocks, false), gemma_like());
    EXPECT_GE(with.hit_tokens, twin.hit_tokens);
    EXPECT_GE(with.hit_tokens, without.hit_tokens);
    EXPECT_EQ(without.pool.window_blocks_slid_out, 0u);
  }
}

TEST(CoreHybrid, ALongDecodeDoesNotPushOtherSessionsPrefixesOut) {
  // Eight sessions' 160-token prompts are cached, then one request decodes 600 tokens. Its
  // sliding blocks leave the window as it goes. Without retention they join the back of the
  // free queue, cached, so the request's new blocks evict the oldest sessions' prefixes; with
  // retention they go to the front and are reused, and every session still hits.
  for (const bool retention : {true, false}) {
    SCOPED_TRACE(retention ? "retention" : "no retention");
    KVCacheManagerConfig c;
    c.watermark = 0;
    c.cache.num_blocks = 210;
    c.max_model_len = 1024;
    c.sliding_window_retention = retention;
    c.cache.groups = gemma_like();
    CheckedManager m(std::move(c));
    for (uint64_t s = 0; s < 8; ++s) {
      Request r(RequestId{100 + s}, iota_tokens(160, static_cast<TokenId>(10000 * (s + 1))));
      ASSERT_TRUE(m.admit(r).has_value());
      m.free(r);
    }
    Request longer(RequestId{1}, iota_tokens(16, 5));
    ASSERT_TRUE(m.admit(longer).has_value());
    for (int t = 0; t < 600; ++t) ASSERT_TRUE(m.decode(longer, 90000 + t).has_value());
    int hits = 0;
    for (uint64_t s = 0; s < 8; ++s) {
      Request again(RequestId{200 + s}, concat(iota_tokens(160, static_cast<TokenId>(10000 * (s + 1))), {1}));
      hits += m.get_computed_blocks(again).num_computed_tokens;
    }
    if (retention) {
      EXPECT_EQ(hits, 8 * 160);
      EXPECT_EQ(m->pool().stats().window_checkpoints_evicted, 0u);
    } else {
      EXPECT_LT(hits, 7 * 160) << "the oldest sessions were evicted";
    }
  }
}

TEST(CoreHybrid, KVEventsCarryTheGroupsKindAndWindow) {
  KVCacheManagerConfig c;
  c.watermark = 0;
  c.enable_events = true;
  c.cache.num_blocks = 32;
  c.cache.groups = {group(AttentionKind::kFull, 4), group(AttentionKind::kSlidingWindow, 4, 8)};
  CheckedManager m(std::move(c));
  Request a(RequestId{1}, iota_tokens(20, 0));
  ASSERT_TRUE(m.admit(a).has_value());
  ASSERT_TRUE(m.decode(a, 99).has_value());
  bool full = false, sliding = false, slid_out = false;
  for (const KVEvent& e : m->take_events()) {
    if (e.kind == KVEventKind::kBlockStored && e.group == 0) {
      full = true;
      EXPECT_EQ(e.attention_kind, AttentionKind::kFull);
      EXPECT_EQ(e.sliding_window, 0);
    }
    if (e.group == 1) {
      sliding = true;
      EXPECT_EQ(e.attention_kind, AttentionKind::kSlidingWindow);
      EXPECT_EQ(e.sliding_window, 8);
    }
    if (e.kind == KVEventKind::kBlockRemoved && e.reason == RemovalReason::kSlidOut) slid_out = true;
  }
  EXPECT_TRUE(full);
  EXPECT_TRUE(sliding);
  EXPECT_FALSE(slid_out) << "blocks 0..1 were never cached, block 2 is a checkpoint (the last prompt block's window)";
  EXPECT_EQ(removal_reason_name(RemovalReason::kSlidOut), "slid_out");
}

// The uniform-page rule's groups run as planned: Gemma 3's seven groups (block 16), and a model
// whose sliding layers hold a quarter of the full layers' bytes per token (sliding blocks of 64
// tokens, full blocks of 16: hits are multiples of 64).
TEST(CoreHybrid, PlannedGroupsRunInOnePool) {
  {
    const HybridModelShape* g3 = find_hybrid_model_preset("gemma-3-27b");
    ASSERT_NE(g3, nullptr);
    KVCacheManagerConfig c;
    c.watermark = 0;
    c.cache.num_blocks = 2048;
    c.cache.groups = to_cache_groups(plan_hybrid_kv(*g3, 16, DType::kBF16, 4096).groups);
    ASSERT_EQ(c.cache.groups.size(), 7u);
    CheckedManager m(std::move(c));
    Request a(RequestId{1}, iota_tokens(3000, 0));
    ASSERT_EQ(m.admit(a), 0);
    m.free(a);
    Request b(RequestId{2}, concat(iota_tokens(3000, 0), {7, 7}));
    const ComputedBlocks hit = m.get_computed_blocks(b);
    EXPECT_EQ(hit.num_computed_tokens, 2992) << "A's aligned end";
    for (int g = 0; g < 7; ++g) EXPECT_EQ(hit.group_hit_tokens[static_cast<size_t>(g)], 2992) << "group " << g;
    EXPECT_EQ(m.admit(b), 2992);
    EXPECT_EQ(m->prefix_cache_stats().group_hit_tokens[6], 2u * 2992u) << "two lookups of b";
  }
  std::vector<KVCacheSpec> layers;
  for (int l = 0; l < 4; ++l)
    layers.push_back(KVCacheSpec{.kind = l % 2 ? AttentionKind::kFull : AttentionKind::kSlidingWindow,
                                 .block_size = 16,
                                 .num_kv_heads = l % 2 ? 8 : 2,
                                 .head_dim = 64,
                                 .dtype = DType::kBF16,
                                 .sliding_window = l % 2 ? 0 : 100});
  KVCacheManagerConfig c;
  c.watermark = 0;
  c.cache.num_blocks = 64;
  c.cache.groups = to_cache_groups(group_layers_uniform_page(layers));
  ASSERT_EQ(c.cache.groups[0].spec.block_size, 64);
  CheckedManager m(std::move(c));
  EXPECT_EQ(m->hit_alignment(), 64);
  Request a(RequestId{1}, iota_tokens(300, 0));
  ASSERT_EQ(m.admit(a), 0);
  EXPECT_EQ(m->get_block_ids(a, 0).size(), 5u) << "300 tokens in sliding blocks of 64";
  EXPECT_EQ(m->get_block_ids(a, 1).size(), 19u) << "300 tokens in full blocks of 16";
  m.free(a);
  // The full group has 18 blocks (288 tokens) cached; the common hit is the multiple of 64.
  Request b(RequestId{2}, concat(iota_tokens(300, 0), {1}));
  const ComputedBlocks hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.group_hit_tokens[1], 288);
  EXPECT_EQ(hit.num_computed_tokens, 256);
  EXPECT_EQ(hit.blocks[0].size(), 4u);
  EXPECT_EQ(hit.blocks[1].size(), 16u);
  EXPECT_EQ(m.admit(b), 256);
  // A window of 100 tokens needs 2 sliding blocks before the hit: the first 2 are the null block.
  EXPECT_EQ(m->get_block_ids(b, 0)[0], m->pool().null_block());
  EXPECT_NE(m->get_block_ids(b, 0)[2], m->pool().null_block());
}

TEST(CoreHybrid, BadWorkloadConfigIsAClearError) {
  HybridSessionsConfig c = sessions_config(8, true);
  EXPECT_THROW(run_hybrid_sessions(c, gemma_like()), ConfigError);
  c.sessions = 0;
  EXPECT_THROW(run_hybrid_sessions(c, gemma_like()), ConfigError);
}

}  // namespace
}  // namespace pagedkv
