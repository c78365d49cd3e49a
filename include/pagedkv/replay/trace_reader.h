// Readers for serving traces (docs/replay.md describes the formats):
//   Mooncake JSONL  {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}
//                   one chained id per 512-token block; equal ids at a position = equal prefix.
//   Azure CSV       TIMESTAMP,ContextTokens,GeneratedTokens (Splitwise / Azure LLM inference
//                   traces): arrivals and lengths only; prefix sharing comes from AzurePrefixModel.
//   pagedkv JSONL   {"timestamp": ms, "tokens": [ids...], "output_length": m}: explicit prompts,
//                   for any workload the other two cannot describe.
// A malformed record raises FormatError naming the file and line, or, with `lenient`, is skipped
// and counted in Trace::skipped_lines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <istream>
#include <optional>
#include <string>
#include <string_view>

#include "pagedkv/replay/trace.h"

namespace pagedkv {

// The Azure traces record no content, so who shares what is modelled, reproducibly from `seed`:
// there are `num_system_prompts` shared prompts, prompt k (k = 0 most popular) having a length
// drawn uniformly from [min_prompt_tokens, max_prompt_tokens]. A request starts with a shared
// prompt with probability `share_probability`; which one follows a Zipf law of exponent
// `zipf_exponent` over the prompts (P(k) ∝ 1/(k+1)^s). The request's first
// min(prompt length, ContextTokens) tokens are that prompt's; the rest are unique to it.
struct AzurePrefixModel {
  int num_system_prompts = 16;
  double zipf_exponent = 1.0;
  int min_prompt_tokens = 128;
  int max_prompt_tokens = 1024;
  double share_probability = 0.9;
  uint64_t seed = 1;
  void validate() const;  // ConfigError naming the bad field
};

struct TraceReadOptions {
  TraceFormat format = TraceFormat::kAuto;  // kAuto: by extension (.csv) and first record's keys
  bool lenient = false;  // skip bad lines (counted) instead of failing
  int64_t limit = 0;  // > 0: read at most this many requests
  AzurePrefixModel azure;
};

// Reads a trace file. Throws FormatError (bad content, with file:line) or Error (unreadable file).
Trace read_trace(const std::filesystem::path& path, const TraceReadOptions& options = {});

// Stream versions; `name` labels errors and the trace.
Trace read_mooncake_trace(std::istream& in, const std::string& name, const TraceReadOptions& options = {});
Trace read_azure_trace(std::istream& in, const std::string& name, const TraceReadOptions& options = {});
Trace read_token_trace(std::istream& in, const std::string& name, const TraceReadOptions& options = {});

// Parses "mooncake", "azure", "tokens" or "auto"; nullopt otherwise.
std::optional<TraceFormat> parse_trace_format(std::string_view s);

// Milliseconds since 1970-01-01 of an Azure timestamp "YYYY-MM-DD HH:MM:SS[.fraction]" (UTC
// assumed), or nullopt if it does not parse.
std::optional<double> parse_azure_timestamp_ms(std::string_view s);

}  // namespace pagedkv
