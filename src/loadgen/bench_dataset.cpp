#include "pagedkv/loadgen/bench_dataset.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <random>

#include "pagedkv/core/error.h"

namespace pagedkv::loadgen {
namespace {

void check_pool(const std::vector<TokenId>& pool) {
  if (pool.empty())
    throw ConfigError("bench serve: the token pool is empty (the server's /tokenize returned no tokens)");
}

// `len` ids drawn from the pool, appended to `out`.
void draw(const std::vector<TokenId>& pool, int len, std::mt19937_64& rng, std::vector<TokenId>& out) {
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  for (int i = 0; i < len; ++i) out.push_back(pool[pick(rng)]);
}

int length_in_range(int len, double ratio, std::mt19937_64& rng) {
  const int lo = std::max(1, static_cast<int>(len * (1.0 - ratio)));
  const int hi = std::max(lo, static_cast<int>(len * (1.0 + ratio)));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

}  // namespace

std::vector<BenchRequest> random_dataset(const TokenPool& pool, const RandomDatasetOptions& o, uint64_t seed) {
  check_pool(pool.ids);
  if (o.input_len < 1 || o.output_len < 1)
    throw ConfigError("--random-input-len and --random-output-len must be at least 1");
  if (o.range_ratio < 0 || o.range_ratio >= 1)
    throw ConfigError(fmt::format("--random-range-ratio must be in [0, 1), got {}", o.range_ratio));
  std::mt19937_64 rng(seed);
  std::vector<BenchRequest> out(static_cast<size_t>(o.num_prompts));
  for (BenchRequest& r : out) {
    r.prompt = pool.lead;  // as the server's text prompts start
    const int len = length_in_range(o.input_len, o.range_ratio, rng);
    draw(pool.ids, std::max(1, len - static_cast<int>(pool.lead.size())), rng, r.prompt);
    r.max_tokens = length_in_range(o.output_len, o.range_ratio, rng);
  }
  return out;
}

std::vector<BenchRequest> prefix_repetition_dataset(const TokenPool& pool, const PrefixRepetitionOptions& o,
                                                    uint64_t seed) {
  check_pool(pool.ids);
  if (o.num_prefixes < 1 || o.prefix_len < 1 || o.suffix_len < 0 || o.output_len < 1)
    throw ConfigError(
        "prefix-repetition: --prefix-repetition-num-prefixes and -prefix-len and -output-len must be at least 1");
  std::mt19937_64 rng(seed);
  std::vector<std::vector<TokenId>> prefixes(static_cast<size_t>(o.num_prefixes));
  for (auto& p : prefixes) {
    p = pool.lead;
    draw(pool.ids, std::max(1, o.prefix_len - static_cast<int>(pool.lead.size())), rng, p);
  }
  std::vector<BenchRequest> out(static_cast<size_t>(o.num_prompts));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].prompt = prefixes[i % prefixes.size()];
    draw(pool.ids, o.suffix_len, rng, out[i].prompt);
    out[i].max_tokens = o.output_len;
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::vector<BenchRequest> mooncake_dataset(const std::filesystem::path& trace, const TokenPool& pool,
                                           const MooncakeDatasetOptions& o, uint64_t seed) {
  check_pool(pool.ids);
  if (o.block_tokens < 1) throw ConfigError("--mooncake-block-tokens must be at least 1");
  if (!(o.time_scale >= 0)) throw ConfigError("--time-scale must be at least 0");
  std::ifstream in(trace);
  if (!in) throw Error(fmt::format("cannot open the trace '{}'", trace.string()));
  constexpr int kTraceBlockTokens = 512;  // Mooncake's tokens per hash id
  std::vector<BenchRequest> out;
  int line_no = 0;
  for (std::string line; static_cast<int>(out.size()) < o.num_prompts && std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    auto bad = [&](const char* what) { return FormatError(fmt::format("{}:{}: {}", trace.string(), line_no, what)); };
    if (j.is_discarded() || !j.is_object()) throw bad("not a JSON object");
    if (!j.contains("timestamp") || !j["timestamp"].is_number() || !j.contains("input_length") ||
        !j["input_length"].is_number_integer() || !j.contains("output_length") ||
        !j["output_length"].is_number_integer() || !j.contains("hash_ids") || !j["hash_ids"].is_array())
      throw bad("a Mooncake record needs timestamp, input_length, output_length and hash_ids");
    BenchRequest r;
    r.arrival_s = j["timestamp"].get<double>() / 1000.0 * o.time_scale;
    const int64_t input = j["input_length"].get<int64_t>();
    if (input < 0) throw bad("negative input_length");
    r.max_tokens = static_cast<int>(std::clamp<int64_t>(
        j["output_length"].get<int64_t>() * o.block_tokens / kTraceBlockTokens, 1, std::max(1, o.max_model_len / 4)));
    // Each hash id becomes the same block_tokens ids wherever it appears: equal ids, equal prefixes.
    const auto& ids = j["hash_ids"];
    const int64_t last_block = input - kTraceBlockTokens * (static_cast<int64_t>(ids.size()) - 1);
    for (size_t b = 0; b < ids.size(); ++b) {
      if (!ids[b].is_number_integer()) throw bad("hash_ids must be integers");
      std::mt19937_64 block_rng(seed ^ (0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(ids[b].get<int64_t>()) + 1)));
      const int64_t trace_len =
          b + 1 == ids.size() ? std::clamp<int64_t>(last_block, 1, kTraceBlockTokens) : kTraceBlockTokens;
      draw(pool.ids, static_cast<int>(std::max<int64_t>(1, trace_len * o.block_tokens / kTraceBlockTokens)), block_rng,
           r.prompt);
    }
    r.prompt.insert(r.prompt.begin(), pool.lead.begin(), pool.lead.end());
    const size_t room = static_cast<size_t>(std::max(1, o.max_model_len - r.max_tokens));
    if (r.prompt.size() > room) r.prompt.resize(room);
    out.push_back(std::move(r));
  }
  if (out.empty()) throw FormatError(fmt::format("{}: no requests", trace.string()));
  return out;
}

}  // namespace pagedkv::loadgen
