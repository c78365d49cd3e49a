// A serving trace loaded for replay: one record per request (arrival time, prompt length, output
// length) and a compact description of each prompt's token content, from which the prompt's
// token ids are rebuilt on demand.
//
// Trace formats carry sharing information in different ways (Mooncake: one chained hash id per
// 512-token block; Azure: none, so a seeded model adds it; our own JSONL: the token ids
// themselves). All of them are reduced here to runs of tokens:
//   - a synthetic run stands for `length` tokens whose ids are first, first+1, ..., first+length-1.
//     Token values are handed out so that distinct content never reuses a value, so two prompts
//     share a block of tokens exactly when the trace says they share it;
//   - an explicit run copies `length` ids from Trace::explicit_tokens.
// The KV-cache manager then hashes and matches the rebuilt tokens with its own chained hashing:
// replay exercises the real prefix cache, not a model of it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv {

// Tokens per Mooncake hash id: the traces' block size.
inline constexpr int kMooncakeBlockTokens = 512;

enum class TraceFormat { kAuto, kMooncake, kAzure, kTokens };
std::string_view trace_format_name(TraceFormat f);

struct ContentRun {
  int64_t first = 0;  // synthetic: first token value; explicit: offset into explicit_tokens
  int32_t length = 0;
  bool is_explicit = false;
};

struct TraceRequest {
  double arrival_ms = 0;  // relative to the trace's first request
  int32_t input_tokens = 0;
  int32_t output_tokens = 0;
  uint32_t first_run = 0;  // runs [first_run, first_run + num_runs) of Trace::runs
  uint32_t num_runs = 0;
  int32_t line = 0;  // 1-based line of the record in its file (0: not from a file)
  // End-to-end time of the request when it was served (pagedkv JSONL "latency_ms", written by
  // `bench serve --save-requests`); -1: unknown. The cluster replay's kv router uses it to know
  // which requests were in flight when another arrived.
  double latency_ms = -1;
};

struct Trace {
  std::string name;  // file stem, for tables and plot legends
  TraceFormat format = TraceFormat::kAuto;
  std::vector<TraceRequest> requests;
  std::vector<ContentRun> runs;
  std::vector<TokenId> explicit_tokens;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  int64_t skipped_lines = 0;  // bad lines skipped under lenient reading
  int64_t distinct_hash_ids = 0;  // Mooncake only: distinct hash ids

  size_t size() const { return requests.size(); }
  // Appends request `i`'s prompt token ids to `out`.
  void append_prompt(size_t i, std::vector<TokenId>& out) const;
  // Blocks of `block_size` tokens covering request `i`'s prompt (the last may be partial).
  int64_t prompt_blocks(size_t i, int block_size) const {
    const int64_t n = requests[i].input_tokens;
    return (n + block_size - 1) / block_size;
  }
  // Σ prompt_blocks over all requests.
  int64_t total_prompt_blocks(int block_size) const;
  // The first `n` requests only (n >= size(): unchanged). Runs are kept.
  void truncate(size_t n);
};

}  // namespace pagedkv
