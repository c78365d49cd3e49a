// Cache-only replay with LRU must reproduce, exactly, the "LRU with vLLM block-pool semantics"
// table of ../shared/traces/README.md (rates to the table's 4 decimals, evictions to the unit).
// The table was computed by an independent simulation; here the real KVCacheManager runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "pagedkv/replay/cache_replay.h"
#include "pagedkv/replay/trace_reader.h"

namespace pagedkv {
namespace {

struct ReferenceRow {
  const char* file;
  int block_size;
  int64_t capacity_blocks;
  double block_hit_rate;  // as printed: 4 decimals
  double token_hit_rate;
  int64_t evictions;
};

std::filesystem::path traces_dir() {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  return std::filesystem::path(shared ? shared : "../shared") / "traces";
}

// Loads each trace once for the whole test program.
const Trace* load(const char* file) {
  static std::map<std::string, Trace> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    const auto path = traces_dir() / file;
    if (!std::filesystem::exists(path)) return nullptr;
    it = cache.emplace(file, read_trace(path)).first;
  }
  return &it->second;
}

void check_row(const ReferenceRow& row) {
  const Trace* trace = load(row.file);
  if (trace == nullptr) GTEST_SKIP() << "trace " << (traces_dir() / row.file) << " not found (set PAGEDKV_SHARED_DIR)";
  CacheReplayConfig config;
  config.block_size = row.block_size;
  config.capacity_blocks = row.capacity_blocks;
  config.policy = "lru";
  const CacheReplayResult r = replay_cache(*trace, config);
  SCOPED_TRACE(::testing::Message() << row.file << " block " << row.block_size << " capacity " << row.capacity_blocks);
  // The table rounds to 4 decimals: our rate must round to the same digits.
  EXPECT_NEAR(r.block_hit_rate(), row.block_hit_rate, 0.00005) << "block hit rate " << r.block_hit_rate();
  EXPECT_NEAR(r.token_hit_rate(), row.token_hit_rate, 0.00005) << "token hit rate " << r.token_hit_rate();
  EXPECT_EQ(r.evictions, row.evictions);
  EXPECT_EQ(r.unserved_requests, 0);
  EXPECT_EQ(r.requests, static_cast<int64_t>(trace->size()));
  // Every block is either a hit or allocated (and was then freed).
  EXPECT_EQ(r.hit_blocks + r.allocated_blocks, r.prompt_blocks);
  EXPECT_GE(r.evicted_blocks, r.evictions);
}

constexpr const char* kConversation = "mooncake_conversation_trace.jsonl";
constexpr const char* kSynthetic = "mooncake_synthetic_trace.jsonl";
constexpr const char* kArxiv = "mooncake_arxiv_trace_first1000.jsonl";

class ReferenceBlock512 : public ::testing::TestWithParam<ReferenceRow> {};

TEST_P(ReferenceBlock512, MatchesTheTable) { check_row(GetParam()); }

INSTANTIATE_TEST_SUITE_P(TracesReadme, ReferenceBlock512,
                         ::testing::Values(ReferenceRow{kConversation, 512, 200000, .3660, .3734, 0},
                                           ReferenceRow{kConversation, 512, 100000, .3633, .3706, 78452},
                                           ReferenceRow{kConversation, 512, 50000, .3541, .3613, 127455},
                                           ReferenceRow{kConversation, 512, 30000, .3253, .3319, 154380},
                                           ReferenceRow{kConversation, 512, 10000, .2113, .2156, 206017},
                                           ReferenceRow{kConversation, 512, 5859, .1359, .1386, 231740},
                                           ReferenceRow{kConversation, 512, 1000, .0445, .0454, 262697},
                                           ReferenceRow{kSynthetic, 512, 200000, .6379, .6504, 0},
                                           ReferenceRow{kSynthetic, 512, 30000, .6226, .6348, 14689},
                                           ReferenceRow{kSynthetic, 512, 10000, .4230, .4313, 57076},
                                           ReferenceRow{kSynthetic, 512, 5859, .3087, .3148, 74830},
                                           ReferenceRow{kSynthetic, 512, 1000, .0840, .0857, 106702},
                                           ReferenceRow{kArxiv, 512, 200000, .3794, .3905, 0},
                                           ReferenceRow{kArxiv, 512, 10000, .3780, .3891, 2021},
                                           ReferenceRow{kArxiv, 512, 5859, .3424, .3524, 6533},
                                           ReferenceRow{kArxiv, 512, 1000, .2827, .2910, 12215}));

// Block size 16: each 512-token trace block becomes 32 blocks whose content depends on (hash
// id, position); the whole conversation trace, about 9 M blocks per run.
TEST(ReferenceBlock16, Conversation3MTokens) { check_row({kConversation, 16, 187500, .1416, .1417, 7574540}); }
TEST(ReferenceBlock16, Conversation10MTokens) { check_row({kConversation, 16, 625000, .2934, .2936, 5763171}); }
TEST(ReferenceBlock16, ConversationNoEviction) { check_row({kConversation, 16, 10000000, .3734, .3736, 0}); }

}  // namespace
}  // namespace pagedkv
