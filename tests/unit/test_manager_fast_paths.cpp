// allocate_slots' steady-state fast path (a call that adds no block and caches none answers
// without the general path) against the general path: two managers, one with the fast path
// off, run the same random operations (admission with prefix hits, chunked prefill, decode,
// lookahead, delayed caching, requests that skip the cache, forks, frees, preemptions, uncaching
// uncomputed blocks, replaced table entries; one group or two of different block sizes) and must
// agree after every call on everything observable: each call's answer (new block ids, whether
// the table was rewritten), every block table, the free queue in eviction order, the cached
// blocks, the pool's and the prefix cache's statistics, the KV events and the requests' hashes.
// Both run the invariant checker after every call. Requests are looked up through their slot
// hints, which this test also scrambles (a stale or foreign hint must fall back to the index).
#include <gtest/gtest.h>

#include <random>

#include "core_test_support.h"

namespace pagedkv {
namespace {

using testing::free_order;
using testing::ids_of;

// The second group: none, a sliding-window group, or a full-attention group with blocks twice
// the size (the fast path's bounds are per group).
enum class Second { kNone, kSliding, kDoubleBlocks };

struct Pair {
  KVCacheManager fast, general;
  Pair(const KVCacheManagerConfig& base, Second second)
      : fast(make(base, true, second)), general(make(base, false, second)) {}
  static KVCacheManagerConfig make(const KVCacheManagerConfig& base, bool fast_path, Second second) {
    KVCacheManagerConfig c;
    c.cache = base.cache;
    if (second != Second::kNone) {
      KVCacheGroupSpec g = c.cache.groups.front();
      if (second == Second::kSliding) {
        g.spec.kind = AttentionKind::kSlidingWindow;
        g.spec.sliding_window = 40;
      } else {
        g.spec.block_size *= 2;
      }
      c.cache.groups.push_back(g);
    }
    c.enable_events = true;
    c.enable_steady_state_fast_path = fast_path;
    return c;
  }
};

void expect_same_answer(const std::optional<NewBlocks>& a, const std::optional<NewBlocks>& b, int groups) {
  ASSERT_EQ(a.has_value(), b.has_value());
  if (!a) return;
  EXPECT_EQ(a->num_groups, b->num_groups);
  EXPECT_EQ(a->table_rewritten, b->table_rewritten);
  for (int g = 0; g < groups; ++g)
    EXPECT_EQ(ids_of(a->blocks[static_cast<size_t>(g)]), ids_of(b->blocks[static_cast<size_t>(g)])) << "group " << g;
}

void expect_same_state(Pair& p, const std::vector<Request>& fast_reqs, const std::vector<Request>& general_reqs) {
  p.fast.check_invariants();
  p.general.check_invariants();
  ASSERT_EQ(p.fast.num_requests(), p.general.num_requests());
  for (size_t i = 0; i < fast_reqs.size(); ++i) {
    for (int g = 0; g < p.fast.num_groups(); ++g)
      ASSERT_EQ(ids_of(p.fast.get_block_ids(fast_reqs[i], g)), ids_of(p.general.get_block_ids(general_reqs[i], g)))
          << "request " << i << " group " << g;
    ASSERT_EQ(fast_reqs[i].block_hashes, general_reqs[i].block_hashes) << "request " << i;
  }
  ASSERT_EQ(free_order(p.fast.pool()), free_order(p.general.pool()));
  ASSERT_EQ(p.fast.pool().num_cached_blocks(), p.general.pool().num_cached_blocks());
  const BlockPoolStats &a = p.fast.pool().stats(), &b = p.general.pool().stats();
  ASSERT_EQ(a.allocated_blocks, b.allocated_blocks);
  ASSERT_EQ(a.evictions, b.evictions);
  ASSERT_EQ(a.cached_blocks_stored, b.cached_blocks_stored);
  ASSERT_EQ(p.fast.prefix_cache_stats().hits, p.general.prefix_cache_stats().hits);
  ASSERT_EQ(p.fast.prefix_cache_stats().queries, p.general.prefix_cache_stats().queries);
  const auto ea = p.fast.take_events(), eb = p.general.take_events();
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    ASSERT_EQ(ea[i].kind, eb[i].kind);
    ASSERT_EQ(ea[i].block, eb[i].block);
    ASSERT_EQ(ea[i].hash, eb[i].hash);
  }
  ASSERT_EQ(p.fast.take_pending_copies(), p.general.take_pending_copies());
}

void run_random(Second second, uint64_t seed, int ops) {
  const bool sliding = second == Second::kSliding;
  SCOPED_TRACE(::testing::Message() << "seed " << seed
                                    << (sliding                           ? ", sliding window"
                                        : second == Second::kDoubleBlocks ? ", full attention, two block sizes"
                                                                          : ", full attention"));
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const int bs = 4;
  Pair p(testing::full_attention_config(96, bs), second);
  // Prompts share prefixes (three stems), so admissions hit the cache.
  std::vector<std::vector<TokenId>> stems = {testing::iota_tokens(12, 1000), testing::iota_tokens(9, 2000),
                                             testing::iota_tokens(20, 3000)};
  std::vector<Request> fr, gr;  // the same requests, one copy per manager
  std::vector<bool> live;
  // Where each request's last scheduled chunk began (a preemption may undo it), and whether it
  // shares blocks through a fork (its chunks' blocks may be another request's computed ones).
  std::vector<int> chunk_start;
  std::vector<bool> forked;
  uint64_t next_id = 0;
  const int max_len = p.fast.max_model_len();
  for (int op = 0; op < ops; ++op) {
    SCOPED_TRACE(::testing::Message() << "operation " << op);
    const int kind = pick(10);
    if ((kind == 0 && fr.size() < 12) || fr.size() < 3) {  // a new request, admitted with its prefix hits
      std::vector<TokenId> prompt = stems[static_cast<size_t>(pick(3))];
      prompt.resize(static_cast<size_t>(1 + pick(static_cast<int>(prompt.size()))));
      for (int t = pick(12); t > 0; --t) prompt.push_back(static_cast<TokenId>(pick(50)));
      Request r(RequestId{next_id++}, prompt);
      r.skip_prefix_cache = pick(8) == 0;
      fr.push_back(r);
      gr.push_back(r);
      live.push_back(false);
      chunk_start.push_back(0);
      forked.push_back(false);
    }
    const size_t i = static_cast<size_t>(pick(static_cast<int>(fr.size())));
    Request &f = fr[i], &g = gr[i];
    if (pick(13) == 0) f.manager_slot = static_cast<uint32_t>(pick(6));  // a stale hint
    if (!live[i]) {
      if (f.num_tokens() >= max_len) continue;
      ComputedBlocks hf, hg;
      p.fast.get_computed_blocks(f, hf);
      p.general.get_computed_blocks(g, hg);
      ASSERT_EQ(hf.num_computed_tokens, hg.num_computed_tokens);
      const int n = std::max(1, std::min(f.num_tokens() - hf.num_computed_tokens, 1 + pick(12)));
      const auto a = p.fast.allocate_slots(f, n, hf.num_computed_tokens, &hf);
      const auto b = p.general.allocate_slots(g, n, hg.num_computed_tokens, &hg);
      expect_same_answer(a, b, p.fast.num_groups());
      if (a) {
        live[i] = true;
        chunk_start[i] = hf.num_computed_tokens;
        f.num_computed_tokens = g.num_computed_tokens = hf.num_computed_tokens + n;
      }
    } else if (kind <= 7) {  // the next chunk or a decode step (appending a token when caught up)
      if (f.num_computed_tokens == f.num_tokens()) {
        if (f.num_tokens() + 4 >= max_len) continue;
        const TokenId t = static_cast<TokenId>(pick(50));
        f.append_token(t);
        g.append_token(t);
      }
      const int left = f.num_tokens() - f.num_computed_tokens;
      const int n = pick(3) == 0 ? std::min(left, 1 + pick(10)) : 1;
      const int lookahead = pick(6) == 0 ? pick(3) : 0;
      const bool delay = pick(9) == 0;
      const auto a = p.fast.allocate_slots(f, n, 0, nullptr, lookahead, delay);
      const auto b = p.general.allocate_slots(g, n, 0, nullptr, lookahead, delay);
      expect_same_answer(a, b, p.fast.num_groups());
      if (a) {
        chunk_start[i] = f.num_computed_tokens;
        f.num_computed_tokens = g.num_computed_tokens = f.num_computed_tokens + n;
      }
    } else if (kind == 8 && !sliding && fr.size() < 12) {  // fork into a new request (copy-on-write from then on)
      Request cf = f, cg = g;
      cf.id = cg.id = RequestId{next_id++};
      cf.manager_slot = cg.manager_slot = ~uint32_t{0};
      p.fast.fork(f, cf);
      p.general.fork(g, cg);
      fr.push_back(cf);
      gr.push_back(cg);
      live.push_back(true);
      chunk_start.push_back(cf.num_computed_tokens);  // not f: the push_back above may have moved it
      forked[i] = true;
      forked.push_back(true);
    } else if (kind == 8 && pick(2) == 0) {  // a table entry swapped for a fresh block (swap-in, tier promotion)
      const int group = pick(p.fast.num_groups());
      const int held = static_cast<int>(p.fast.get_block_ids(f, group).size());
      if (held == 0 || p.fast.num_free_blocks() == 0) continue;
      const int index = pick(held);
      std::vector<BlockId> bf, bg;
      p.fast.pool().allocate(1, bf);
      p.general.pool().allocate(1, bg);
      p.fast.replace_block(f.id, group, index, bf.front());
      p.general.replace_block(g.id, group, index, bg.front());
    } else {  // finish (the request leaves) or preempt (free, recompute from scratch later)
      if (live[i] && !forked[i] && pick(3) == 0) {  // preempted with its last chunk scheduled but not run
        f.num_computed_tokens = g.num_computed_tokens = chunk_start[i];
        p.fast.uncache_uncomputed_blocks(f);
        p.general.uncache_uncomputed_blocks(g);
        expect_same_state(p, fr, gr);
        if (::testing::Test::HasFatalFailure()) return;
      }
      ASSERT_EQ(p.fast.free(f), p.general.free(g));
      live[i] = false;
      f.num_computed_tokens = g.num_computed_tokens = 0;
      ++f.num_preemptions;
      ++g.num_preemptions;
      if (pick(2) == 0) {
        std::swap(fr[i], fr.back());
        std::swap(gr[i], gr.back());
        live[i] = live.back();
        chunk_start[i] = chunk_start.back();
        forked[i] = forked.back();
        fr.pop_back();
        gr.pop_back();
        live.pop_back();
        chunk_start.pop_back();
        forked.pop_back();
      }
    }
    expect_same_state(p, fr, gr);
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (sliding) EXPECT_EQ(p.fast.steady_state_calls(), 0u);
  else EXPECT_GT(p.fast.steady_state_calls(), static_cast<uint64_t>(ops) / 10);
  EXPECT_EQ(p.general.steady_state_calls(), 0u);
}

TEST(CoreFastPaths, SteadyStateAllocateSlotsMatchesTheGeneralPath) {
  for (uint64_t seed = 1; seed <= 6; ++seed) run_random(Second::kNone, seed, 3000);
}

TEST(CoreFastPaths, TwoBlockSizesMatchTheGeneralPath) {
  for (uint64_t seed = 1; seed <= 4; ++seed) run_random(Second::kDoubleBlocks, seed, 3000);
}

TEST(CoreFastPaths, MixedGroupsNeverTakeTheFastPath) {
  for (uint64_t seed = 1; seed <= 2; ++seed) run_random(Second::kSliding, seed, 1500);
}

}  // namespace
}  // namespace pagedkv
