// The load generator's parts that decide what a benchmark measures: arrival times, the datasets,
// the latency statistics and the /metrics reader. (The requests themselves are exercised end to
// end against a real server in tests/python/test_serve.py.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/loadgen/arrival_process.h"
#include "pagedkv/loadgen/bench_dataset.h"
#include "pagedkv/loadgen/serve_benchmark.h"

namespace pagedkv::loadgen {
namespace {

std::vector<double> gaps_of(const std::vector<double>& times) {
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  return gaps;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double coefficient_of_variation(const std::vector<double>& v) {
  const double m = mean(v);
  double var = 0;
  for (double x : v) var += (x - m) * (x - m);
  return std::sqrt(var / static_cast<double>(v.size())) / m;
}

TEST(ArrivalProcess, InfiniteRateSendsEverythingAtOnce) {
  const auto t = arrival_times(50, std::numeric_limits<double>::infinity(), 1.0, 7);
  ASSERT_EQ(t.size(), 50u);
  for (double x : t) EXPECT_EQ(x, 0.0);
}

TEST(ArrivalProcess, PoissonAndGammaGapsHaveTheRequestedRateAndShape) {
  // 20,000 gaps: the sample mean is within 2 % of 1 / rate and the coefficient of variation within
  // a few percent of 1 / sqrt(shape) (1 for Poisson arrivals, 0.5 for burstiness 4, 2 for 0.25).
  for (const double burstiness : {1.0, 4.0, 0.25}) {
    const auto times = arrival_times(20001, 10.0, burstiness, 42);
    EXPECT_EQ(times.front(), 0.0);
    EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
    const auto gaps = gaps_of(times);
    EXPECT_NEAR(mean(gaps), 0.1, 0.002) << "burstiness " << burstiness;
    EXPECT_NEAR(coefficient_of_variation(gaps), 1.0 / std::sqrt(burstiness), 0.06 / std::sqrt(burstiness))
        << "burstiness " << burstiness;
  }
}

TEST(ArrivalProcess, SeededAndValidated) {
  EXPECT_EQ(arrival_times(100, 5.0, 1.0, 3), arrival_times(100, 5.0, 1.0, 3));
  EXPECT_NE(arrival_times(100, 5.0, 1.0, 3), arrival_times(100, 5.0, 1.0, 4));
  EXPECT_THROW(arrival_times(10, 0.0, 1.0, 0), ConfigError);
  EXPECT_THROW(arrival_times(10, -1.0, 1.0, 0), ConfigError);
  EXPECT_THROW(arrival_times(10, std::nan(""), 1.0, 0), ConfigError);
  EXPECT_THROW(arrival_times(10, 1.0, 0.0, 0), ConfigError);
  EXPECT_THROW(arrival_times(10, 1.0, std::numeric_limits<double>::infinity(), 0), ConfigError);
}

const TokenPool kPool = {{500, 501, 502, 503, 504, 505, 506, 507}, {1}};  // BOS 1, as llama2.c

bool from_pool(const std::vector<TokenId>& ids, size_t from) {
  return std::all_of(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end(),
                     [](TokenId id) { return std::find(kPool.ids.begin(), kPool.ids.end(), id) != kPool.ids.end(); });
}

TEST(BenchDataset, RandomLengthsStayInTheirRanges) {
  RandomDatasetOptions o;
  o.num_prompts = 500;
  o.input_len = 100;
  o.output_len = 40;
  o.range_ratio = 0.5;
  const auto requests = random_dataset(kPool, o, 1);
  ASSERT_EQ(requests.size(), 500u);
  std::set<size_t> input_lengths;
  for (const BenchRequest& r : requests) {
    EXPECT_GE(r.prompt.size(), 50u);
    EXPECT_LE(r.prompt.size(), 150u);
    EXPECT_GE(r.max_tokens, 20);
    EXPECT_LE(r.max_tokens, 60);
    EXPECT_EQ(r.prompt.front(), 1);  // BOS
    EXPECT_TRUE(from_pool(r.prompt, 1));
    EXPECT_FALSE(r.arrival_s.has_value());
    input_lengths.insert(r.prompt.size());
  }
  EXPECT_GT(input_lengths.size(), 50u);  // the lengths really vary
  o.range_ratio = 0;
  for (const BenchRequest& r : random_dataset(kPool, o, 1)) {
    EXPECT_EQ(r.prompt.size(), 100u);
    EXPECT_EQ(r.max_tokens, 40);
  }
  EXPECT_EQ(random_dataset(kPool, o, 9)[3].prompt, random_dataset(kPool, o, 9)[3].prompt);
  o.range_ratio = 1.0;
  EXPECT_THROW(random_dataset(kPool, o, 1), ConfigError);
  EXPECT_THROW(random_dataset({}, RandomDatasetOptions{}, 1), ConfigError);
}

TEST(BenchDataset, PromptsStartAsTheServersTextPromptsDo) {
  RandomDatasetOptions r;
  r.num_prompts = 20;
  r.input_len = 10;
  PrefixRepetitionOptions p;
  p.num_prompts = 6;
  p.num_prefixes = 2;
  p.prefix_len = 8;
  p.suffix_len = 2;
  for (const std::vector<TokenId>& lead :
       {std::vector<TokenId>{}, std::vector<TokenId>{128000}, std::vector<TokenId>{2, 3}}) {
    const TokenPool pool{kPool.ids, lead};
    for (const BenchRequest& q : random_dataset(pool, r, 3)) {
      ASSERT_EQ(q.prompt.size(), 10u);
      EXPECT_TRUE(std::equal(lead.begin(), lead.end(), q.prompt.begin()));
      EXPECT_TRUE(from_pool(q.prompt, lead.size()));
    }
    for (const BenchRequest& q : prefix_repetition_dataset(pool, p, 3)) {
      ASSERT_EQ(q.prompt.size(), 10u);
      EXPECT_TRUE(std::equal(lead.begin(), lead.end(), q.prompt.begin()));
      EXPECT_TRUE(from_pool(q.prompt, lead.size()));
    }
  }
}

TEST(BenchDataset, PrefixRepetitionSharesExactlyItsPrefixes) {
  PrefixRepetitionOptions o;
  o.num_prompts = 60;
  o.num_prefixes = 3;
  o.prefix_len = 32;
  o.suffix_len = 8;
  o.output_len = 5;
  const auto requests = prefix_repetition_dataset(kPool, o, 2);
  ASSERT_EQ(requests.size(), 60u);
  std::map<std::vector<TokenId>, int> prefixes;
  for (const BenchRequest& r : requests) {
    ASSERT_EQ(r.prompt.size(), 40u);
    EXPECT_EQ(r.max_tokens, 5);
    ++prefixes[std::vector<TokenId>(r.prompt.begin(), r.prompt.begin() + 32)];
  }
  ASSERT_EQ(prefixes.size(), 3u);
  for (const auto& [prefix, count] : prefixes) EXPECT_EQ(count, 20) << "each prefix used equally often";
}

class MooncakeDataset : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / ("pagedkv_loadgen_" + std::to_string(::getpid()) + "_" +
                                                                std::to_string(paths_.size()) + ".jsonl");
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }
  std::vector<std::filesystem::path> paths_;
};

TEST_F(MooncakeDataset, EqualHashIdsGiveEqualTokenBlocks) {
  const auto path = write(
      "{\"timestamp\": 0, \"input_length\": 1500, \"output_length\": 64, \"hash_ids\": [0, 1, 2]}\n"
      "\n"
      "{\"timestamp\": 2000, \"input_length\": 1200, \"output_length\": 512, \"hash_ids\": [0, 1, 7]}\n"
      "{\"timestamp\": 4000, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [9]}\n");
  MooncakeDatasetOptions o;
  o.num_prompts = 10;
  o.block_tokens = 16;
  o.time_scale = 0.5;
  o.max_model_len = 512;
  const auto r = mooncake_dataset(path, kPool, o, 5);
  ASSERT_EQ(r.size(), 3u);
  // Arrivals: the trace's milliseconds, scaled.
  EXPECT_DOUBLE_EQ(*r[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(*r[1].arrival_s, 1.0);
  EXPECT_DOUBLE_EQ(*r[2].arrival_s, 2.0);
  // BOS, then 16 tokens per full 512-token block; the last block scaled by its share of 512.
  ASSERT_EQ(r[0].prompt.size(), 1u + 16 + 16 + (1500 - 1024) * 16 / 512);
  ASSERT_EQ(r[1].prompt.size(), 1u + 16 + 16 + (1200 - 1024) * 16 / 512);
  EXPECT_EQ(r[2].prompt.size(), 1u + 100 * 16 / 512);
  // Requests 0 and 1 share hash ids 0 and 1: their first 33 tokens are equal, the block after not.
  EXPECT_TRUE(std::equal(r[0].prompt.begin(), r[0].prompt.begin() + 33, r[1].prompt.begin()));
  EXPECT_NE(std::vector<TokenId>(r[0].prompt.begin() + 33, r[0].prompt.begin() + 38),
            std::vector<TokenId>(r[1].prompt.begin() + 33, r[1].prompt.begin() + 38));
  // Output lengths scaled the same way (at least 1).
  EXPECT_EQ(r[0].max_tokens, 2);
  EXPECT_EQ(r[1].max_tokens, 16);
  EXPECT_EQ(r[2].max_tokens, 1);
  for (const BenchRequest& q : r) EXPECT_TRUE(from_pool(q.prompt, 1));
}

TEST_F(MooncakeDataset, LongPromptsAreCutToFitTheModel) {
  std::string ids;
  for (int i = 0; i < 64; ++i) ids += (i ? ", " : "") + std::to_string(i);
  const auto path =
      write("{\"timestamp\": 0, \"input_length\": 32768, \"output_length\": 4096, \"hash_ids\": [" + ids + "]}\n");
  MooncakeDatasetOptions o;
  o.max_model_len = 512;
  const auto r = mooncake_dataset(path, kPool, o, 5);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].max_tokens, 128);  // 4096 * 16 / 512, capped at a quarter of the model length
  EXPECT_EQ(static_cast<int>(r[0].prompt.size()) + r[0].max_tokens, 512);
}

TEST_F(MooncakeDataset, MalformedRecordsNameTheirLine) {
  const auto path = write(
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 1, \"input_length\": 10, \"hash_ids\": [0]}\n");
  try {
    mooncake_dataset(path, kPool, MooncakeDatasetOptions{}, 0);
    FAIL() << "a record without output_length was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(":2:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mooncake_dataset(write("not json\n"), kPool, MooncakeDatasetOptions{}, 0), FormatError);
  EXPECT_THROW(mooncake_dataset(write(""), kPool, MooncakeDatasetOptions{}, 0), FormatError);
  EXPECT_THROW(mooncake_dataset("/nonexistent/trace.jsonl", kPool, MooncakeDatasetOptions{}, 0), Error);
}

TEST(LatencySummary, PercentilesInterpolateBetweenRanksAsNumpy) {
  std::vector<double> seconds;
  for (int i = 100; i >= 1; --i) seconds.push_back(i);  // unsorted on purpose
  const LatencySummary s = summarize_ms(seconds);
  EXPECT_DOUBLE_EQ(s.mean, 50.5e3);
  EXPECT_DOUBLE_EQ(s.median, 50.5e3);  // numpy.percentile(range(1, 101), 50)
  EXPECT_NEAR(s.p99, 99.01e3, 1e-6);  // numpy.percentile(range(1, 101), 99)
  const LatencySummary one = summarize_ms({0.002});
  EXPECT_DOUBLE_EQ(one.median, 2.0);
  EXPECT_DOUBLE_EQ(one.p99, 2.0);
  const LatencySummary none = summarize_ms({});
  EXPECT_EQ(none.mean, 0.0);
}

TEST(MetricsText, SumsTheSamplesOfOneMetricAndLabel) {
  const std::string text =
      "# HELP vllm:prefix_cache_hits_total Prefix-cache hits.\n"
      "# TYPE vllm:prefix_cache_hits_total counter\n"
      "vllm:prefix_cache_hits_total{model_name=\"m\"} 96\n"
      "vllm:prefix_cache_hits_total_extra{model_name=\"m\"} 1000\n"
      "pagedkv:prefix_cache_hit_tokens_total{model_name=\"m\",tier=\"device\"} 64\n"
      "pagedkv:prefix_cache_hit_tokens_total{model_name=\"m\",tier=\"remote\"} 32\n"
      "plain_metric 2.5\n";
  EXPECT_EQ(metric_value(text, "vllm:prefix_cache_hits_total"), 96);
  EXPECT_EQ(metric_value(text, "pagedkv:prefix_cache_hit_tokens_total"), 96);
  EXPECT_EQ(metric_value(text, "pagedkv:prefix_cache_hit_tokens_total", "tier=\"remote\""), 32);
  EXPECT_EQ(metric_value(text, "pagedkv:prefix_cache_hit_tokens_total", "tier=\"disk\""), -1);
  EXPECT_EQ(metric_value(text, "plain_metric"), 2.5);
  EXPECT_EQ(metric_value(text, "absent"), -1);
}

}  // namespace
}  // namespace pagedkv::loadgen
