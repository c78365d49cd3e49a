// Steady-state allocate / free / touch / cache lookups do no heap allocation (the pool is sized
// once at construction), and neither does a decode step's allocate_slots. Checked by counting
// calls to the global operator new, which this test program replaces.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "core_test_support.h"

namespace {
std::atomic<uint64_t> g_news{0};
}  // namespace

// Counting replacements of the global allocation functions (the aligned forms keep the
// library's own pair).
void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
// Our operator new uses malloc, so free is the matching release; GCC cannot see that once the
// replaced operators are inlined (ASan builds at -O1) and warns about a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace pagedkv {
namespace {

using testing::iota_tokens;

// Heap allocations made while running f.
template <typename F>
uint64_t news_during(F&& f) {
  const uint64_t before = g_news.load();
  f();
  return g_news.load() - before;
}

TEST(CoreNoAlloc, TheCounterSeesAllocations) {
  static int* volatile sink = nullptr;  // volatile: the compiler may not elide the pair
  EXPECT_GE(news_during([] {
              sink = new int(7);
              delete sink;
            }),
            1u)
      << "the replacement operator new is not in use";
  std::vector<int> v(100);
  EXPECT_GE(news_during([&] { v.resize(1000); }), 1u);
}

TEST(CoreNoAlloc, PoolAllocateFreeTouchAndLookupDoNotAllocate) {
  BlockPool pool(testing::pool_options(64, 16));
  std::vector<BlockId> held;
  held.reserve(64);
  std::vector<std::vector<TokenId>> content;
  for (int i = 0; i < 8; ++i) content.push_back(iota_tokens(16, i * 100));
  auto key = [&](int i) {
    BlockContentKey k;
    k.hash = BlockHash{static_cast<uint64_t>(i) + 1, 0};
    k.tokens = content[static_cast<size_t>(i)];
    k.parent_block = kNoLink;
    return k;
  };
  const uint64_t n = news_during([&] {
    for (int round = 0; round < 2000; ++round) {
      held.clear();
      if (!pool.allocate(8, held)) std::abort();  // reuses cached free blocks: evictions
      for (int i = 0; i < 8; ++i) pool.cache_block(held[static_cast<size_t>(i)], key(i));
      pool.free_blocks(held);
      for (int i = 0; i < 8; ++i) {  // prefix hits: touch and release
        auto hit = pool.find_cached(key(i));
        if (!hit) continue;
        pool.touch(std::span<const BlockId>(&*hit, 1));
        pool.free_blocks(std::span<const BlockId>(&*hit, 1));
      }
    }
  });
  EXPECT_EQ(n, 0u) << "heap allocations in 2000 rounds of allocate/cache/free/lookup/touch";
  EXPECT_GT(pool.stats().evictions, 0u);
  pool.check_invariants();
}

TEST(CoreNoAlloc, DecodeStepAllocateSlotsDoesNotAllocate) {
  KVCacheManager m(testing::full_attention_config(1024, 16));
  std::vector<Request> running;
  for (uint64_t i = 0; i < 32; ++i) {
    Request r(RequestId{i}, iota_tokens(100, static_cast<TokenId>(i * 1000)));
    r.tokens.reserve(4096);
    r.block_hashes.reserve(256);
    r.block_extra_digests.reserve(256);
    auto got = m.allocate_slots(r, r.num_tokens());
    ASSERT_TRUE(got.has_value());
    r.num_computed_tokens = r.num_tokens();
    running.push_back(std::move(r));
  }
  const uint64_t n = news_during([&] {
    for (int step = 0; step < 200; ++step) {
      for (Request& r : running) {
        r.append_token(static_cast<TokenId>(step));
        if (!m.allocate_slots(r, 1)) std::abort();
        r.num_computed_tokens += 1;
      }
    }
  });
  EXPECT_EQ(n, 0u) << "heap allocations in 200 decode steps of 32 requests (blocks filled and cached)";
  m.check_invariants();
  EXPECT_GT(m.pool().num_cached_blocks(), 32 * 6);
}

// Admission as a scheduler runs it (lookup into a reused result, the whole-sequence check,
// allocate_slots with the hits, later free) allocates nothing once the manager has seen as many
// live requests: released request entries keep their tables for the next admission.
TEST(CoreNoAlloc, AdmitAndFreeDoNotAllocateInSteadyState) {
  KVCacheManager m(testing::full_attention_config(512, 16));
  const std::vector<TokenId> shared = iota_tokens(160, 90000);  // 10 blocks every prompt shares
  std::vector<Request> requests;
  for (uint64_t i = 0; i < 48; ++i) {
    Request r(RequestId{i},
              testing::concat(shared, iota_tokens(100 + static_cast<int>(i), static_cast<TokenId>(i * 1000))));
    m.hash_request(r);  // hashed at creation, as vLLM does
    requests.push_back(std::move(r));
  }
  ComputedBlocks hits;
  hits.blocks[0].reserve(256);
  auto admit = [&](Request& r) {
    m.get_computed_blocks(r, hits);
    if (m.get_num_blocks_to_allocate(r, r.num_tokens(), &hits) > m.num_free_blocks()) std::abort();
    if (!m.allocate_slots(r, r.num_tokens() - hits.num_computed_tokens, hits.num_computed_tokens, &hits)) std::abort();
    r.num_computed_tokens = r.num_tokens();
  };
  auto release = [&](Request& r) {
    if (!m.free(r)) std::abort();
    r.num_computed_tokens = 0;
  };
  for (int i = 0; i < 4; ++i) admit(requests[static_cast<size_t>(i)]);  // warm-up: 4 live at most
  for (int i = 0; i < 4; ++i) release(requests[static_cast<size_t>(i)]);
  const uint64_t n = news_during([&] {
    for (size_t i = 4; i < requests.size(); ++i) {  // 4 live, one admitted and one freed per round
      admit(requests[i]);
      if (i >= 7) release(requests[i - 3]);
    }
  });
  EXPECT_EQ(n, 0u) << "heap allocations in 44 admissions and 41 frees";
  EXPECT_EQ(m.num_requests(), 3);
  EXPECT_GE(m.prefix_cache_stats().hits, 47u * 160u) << "every admission after the first hit the shared prefix";
  m.check_invariants();
}

}  // namespace
}  // namespace pagedkv
