// Trace readers: Mooncake JSONL, Azure CSV (with the seeded sharing model), token JSONL; bad
// lines and --lenient; the token content that turns hash ids into real prefix sharing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "pagedkv/core/error.h"
#include "pagedkv/replay/cache_instance.h"
#include "pagedkv/replay/trace_reader.h"

namespace pagedkv {
namespace {

Trace mooncake(const std::string& text, TraceReadOptions o = {}) {
  std::istringstream in(text);
  return read_mooncake_trace(in, "t.jsonl", o);
}

std::vector<TokenId> prompt(const Trace& t, size_t i) {
  std::vector<TokenId> out;
  t.append_prompt(i, out);
  return out;
}

// The message of the FormatError `f` throws (empty if none).
template <typename F>
std::string format_error(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(MooncakeReader, RebuildsSharedPrefixesFromHashIds) {
  const Trace t = mooncake(R"({"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [7, 8]})"
                           "\n"
                           R"({"timestamp": 12, "input_length": 600, "output_length": 1, "hash_ids": [7, 9]})"
                           "\n");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.format, TraceFormat::kMooncake);
  EXPECT_EQ(t.distinct_hash_ids, 3);
  EXPECT_EQ(t.total_input_tokens, 1600);
  EXPECT_EQ(t.requests[1].arrival_ms, 12.0);
  EXPECT_EQ(t.requests[0].output_tokens, 5);
  EXPECT_EQ(t.requests[1].line, 2);
  const auto a = prompt(t, 0), b = prompt(t, 1);
  ASSERT_EQ(a.size(), 1000u);
  ASSERT_EQ(b.size(), 600u);
  // Equal id, equal 512 tokens; different ids, different tokens everywhere.
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 512, b.begin()));
  for (size_t i = 512; i < 600; ++i) EXPECT_NE(a[i], b[i]) << i;
  // Dense ids in first-seen order: id 7 -> 0, 8 -> 1, 9 -> 2; token = dense * 512 + offset.
  EXPECT_EQ(a[0], 0);
  EXPECT_EQ(a[511], 511);
  EXPECT_EQ(a[512], 512);
  EXPECT_EQ(b[512], 1024);
}

TEST(MooncakeReader, BadLinesNameTheLine) {
  const std::string good = R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]})";
  const std::map<std::string, std::string> bad = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "JSON object"},
      {R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})", "missing field \"input_length\""},
      {R"({"timestamp": 0, "input_length": 0, "hash_ids": []})", "input_length"},
      {R"({"timestamp": -5, "input_length": 10, "hash_ids": [1]})", "timestamp"},
      {R"({"timestamp": 0, "input_length": 1025, "hash_ids": [1, 2]})", "expected ceil(1025/512) = 3"},
      {R"({"timestamp": 0, "input_length": 10, "hash_ids": [-1]})", "hash id -1"},
      {R"({"timestamp": 0, "input_length": 10, "hash_ids": "1"})", "array"},
      {R"({"timestamp": 0, "input_length": "10", "hash_ids": [1]})", "must be an integer"},
  };
  for (const auto& [line, reason] : bad) {
    const std::string msg = format_error([&] { mooncake(good + "\n\n" + line + "\n" + good + "\n"); });
    EXPECT_NE(msg.find("t.jsonl:3: "), std::string::npos) << line << " -> " << msg;
    EXPECT_NE(msg.find(reason), std::string::npos) << line << " -> " << msg;
  }
}

TEST(MooncakeReader, LenientSkipsAndCountsBadLines) {
  const std::string good = R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]})";
  TraceReadOptions o;
  o.lenient = true;
  const Trace t = mooncake(good + "\nnope\n" + good + "\n{\"input_length\": 3}\n", o);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.skipped_lines, 2);
  EXPECT_EQ(t.requests[1].line, 3);
}

TEST(MooncakeReader, LimitStopsEarly) {
  std::string text;
  for (int i = 0; i < 10; ++i)
    text += R"({"timestamp": 0, "input_length": 10, "hash_ids": [1]})"
            "\n";
  TraceReadOptions o;
  o.limit = 4;
  EXPECT_EQ(mooncake(text, o).size(), 4u);
  Trace all = mooncake(text);
  all.truncate(3);
  EXPECT_EQ(all.size(), 3u);
  EXPECT_EQ(all.total_input_tokens, 30);
}

TEST(TokenReader, ReadsExplicitPrompts) {
  std::istringstream in(R"({"tokens": [5, 6, 7], "output_length": 2, "timestamp": 3.5})"
                        "\n"
                        R"({"tokens": [5, 6, 8]})"
                        "\n");
  const Trace t = read_token_trace(in, "x.jsonl");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(prompt(t, 0), (std::vector<TokenId>{5, 6, 7}));
  EXPECT_EQ(prompt(t, 1), (std::vector<TokenId>{5, 6, 8}));
  EXPECT_EQ(t.requests[1].arrival_ms, 3.5);  // a missing timestamp repeats the previous one
  EXPECT_EQ(t.requests[1].output_tokens, 0);
  std::istringstream bad(R"({"tokens": [1, -2]})");
  EXPECT_NE(format_error([&] { read_token_trace(bad, "x.jsonl"); }).find("x.jsonl:1: token -2"), std::string::npos);
  std::istringstream empty(R"({"tokens": []})");
  EXPECT_THROW(read_token_trace(empty, "x.jsonl"), FormatError);
}

TEST(AzureTimestamp, ParsesFractionsAndDates) {
  const auto a = parse_azure_timestamp_ms("2023-11-16 18:17:03.9799600");
  const auto b = parse_azure_timestamp_ms("2023-11-16 18:17:04.0319600");
  ASSERT_TRUE(a && b);
  EXPECT_NEAR(*b - *a, 52.0, 1e-3);
  const auto before = parse_azure_timestamp_ms("2023-12-31 23:59:59");
  const auto after = parse_azure_timestamp_ms("2024-01-01 00:00:01");
  ASSERT_TRUE(before && after);
  EXPECT_NEAR(*after - *before, 2000.0, 1e-6);
  EXPECT_FALSE(parse_azure_timestamp_ms("2023-11-16"));
  EXPECT_FALSE(parse_azure_timestamp_ms("2023-13-16 18:17:03"));
  EXPECT_FALSE(parse_azure_timestamp_ms("2023-11-16 18:17:03.x"));
}

std::string azure_csv(int rows) {
  std::string text = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  for (int i = 0; i < rows; ++i)
    text += "2023-11-16 18:17:" + std::to_string(10 + i / 100) + "." + std::to_string(1000 + i % 100) + "," +
            std::to_string(600 + (i * 37) % 900) + "," + std::to_string(1 + i % 7) + "\n";
  return text;
}

Trace azure(const std::string& text, AzurePrefixModel model = {}) {
  std::istringstream in(text);
  TraceReadOptions o;
  o.azure = model;
  return read_azure_trace(in, "a.csv", o);
}

TEST(AzureReader, ArrivalsAndLengths) {
  const Trace t = azure(azure_csv(3));
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.format, TraceFormat::kAzure);
  EXPECT_EQ(t.requests[0].arrival_ms, 0.0);
  EXPECT_NEAR(t.requests[1].arrival_ms, 0.1, 1e-6);  // .1000 -> .1001 s
  EXPECT_EQ(t.requests[2].input_tokens, 600 + 74);
  EXPECT_EQ(t.requests[2].output_tokens, 3);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(prompt(t, i).size(), static_cast<size_t>(t.requests[i].input_tokens));
}

TEST(AzureReader, SharingModelIsSeededAndZipfShaped) {
  AzurePrefixModel m;
  m.num_system_prompts = 4;
  m.zipf_exponent = 1.2;
  m.share_probability = 1.0;
  m.min_prompt_tokens = m.max_prompt_tokens = 256;
  const Trace a = azure(azure_csv(2000), m);
  const Trace b = azure(azure_csv(2000), m);
  // Same seed, same content.
  for (size_t i = 0; i < a.size(); i += 97) EXPECT_EQ(prompt(a, i), prompt(b, i));
  // Every request starts with one of the 4 prompts; the first is the most popular.
  std::map<TokenId, int> first_token_counts;
  for (size_t i = 0; i < a.size(); ++i) ++first_token_counts[prompt(a, i)[0]];
  ASSERT_EQ(first_token_counts.size(), 4u);
  EXPECT_GT(first_token_counts.begin()->second, 2000 / 4);  // prompt 0 holds the first values
  // The unique suffixes never collide with each other or with the prompts.
  std::map<TokenId, int> seen_after_prompt;
  for (size_t i = 0; i < 50; ++i) {
    const auto p = prompt(a, i);
    for (size_t k = 256; k < p.size(); ++k) EXPECT_EQ(seen_after_prompt[p[k]]++, 0);
  }
  m.seed = 2;
  const Trace c = azure(azure_csv(2000), m);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += prompt(a, i)[0] != prompt(c, i)[0];
  EXPECT_GT(differ, 100);
  m.share_probability = 0.0;
  const Trace none = azure(azure_csv(50), m);
  EXPECT_NE(prompt(none, 0)[0], prompt(none, 1)[0]);
}

TEST(AzureReader, BadRowsAndHeaders) {
  std::string text = azure_csv(2);
  text += "2023-11-16 18:17:99.1,10,1\n";
  EXPECT_NE(format_error([&] { azure(text); }).find("a.csv:4: TIMESTAMP"), std::string::npos);
  EXPECT_NE(format_error([&] { azure(azure_csv(1) + "2023-11-16 18:17:10.5,0,1\n"); }).find("a.csv:3: ContextTokens"),
            std::string::npos);
  EXPECT_NE(format_error([&] { azure("time,ContextTokens\n"); }).find("TIMESTAMP"), std::string::npos);
  EXPECT_THROW(azure(""), FormatError);
  AzurePrefixModel bad;
  bad.max_prompt_tokens = 10;
  EXPECT_THROW(azure(azure_csv(1), bad), ConfigError);
}

TEST(ReadTrace, DetectsTheFormat) {
  const auto dir = std::filesystem::temp_directory_path() / ("pagedkv_replay_trace_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "m.jsonl") << R"({"timestamp": 0, "input_length": 3, "hash_ids": [0]})"
                                    "\n";
  std::ofstream(dir / "t.jsonl") << "\n"
                                    R"({"tokens": [1, 2, 3]})"
                                    "\n";
  std::ofstream(dir / "a.csv") << azure_csv(2);
  std::ofstream(dir / "u.jsonl") << R"({"prompt": "hi"})"
                                    "\n";
  EXPECT_EQ(read_trace(dir / "m.jsonl").format, TraceFormat::kMooncake);
  EXPECT_EQ(read_trace(dir / "t.jsonl").format, TraceFormat::kTokens);
  EXPECT_EQ(read_trace(dir / "a.csv").format, TraceFormat::kAzure);
  EXPECT_EQ(read_trace(dir / "m.jsonl").name, "m");
  EXPECT_NE(format_error([&] { read_trace(dir / "u.jsonl"); }).find("--format"), std::string::npos);
  TraceReadOptions forced;
  forced.format = TraceFormat::kTokens;
  EXPECT_THROW(read_trace(dir / "m.jsonl", forced), FormatError);
  EXPECT_THROW(read_trace(dir / "missing.jsonl"), Error);
  std::filesystem::remove_all(dir);
}

// The point of the token content: the manager's own hashing sees exactly the trace's sharing,
// at any block size dividing 512.
TEST(TraceContent, ManagerSeesTheTraceSharing) {
  const Trace t = mooncake(R"({"input_length": 1100, "hash_ids": [1, 2, 3]})"
                           "\n"
                           R"({"input_length": 1100, "hash_ids": [1, 2, 4]})"
                           "\n"
                           R"({"input_length": 700, "hash_ids": [1, 5]})"
                           "\n"
                           R"({"input_length": 512, "hash_ids": [1]})"
                           "\n");
  for (int bs : {16, 64, 512}) {
    CacheInstanceConfig c;
    c.block_size = bs;
    c.capacity_blocks = 1000;
    c.max_prompt_tokens = 1100;
    CacheInstance instance(c);
    Request r;
    std::vector<int64_t> hits;
    for (size_t i = 0; i < t.size(); ++i) {
      load_trace_request(t, i, RequestId{i}, r);
      hits.push_back(instance.serve(r).hit_blocks);
    }
    const int64_t per_id = 512 / bs;
    EXPECT_EQ(hits[0], 0) << bs;
    EXPECT_EQ(hits[1], 2 * per_id) << bs;  // ids 1, 2 shared; id 3 vs 4 differ
    EXPECT_EQ(hits[2], per_id) << bs;  // id 1 only
    EXPECT_EQ(hits[3], (512 - 1) / bs) << bs;  // one token is always computed
    instance.manager().check_invariants();
  }
}

}  // namespace
}  // namespace pagedkv
