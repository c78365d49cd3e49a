// The request sets `pagedkv bench serve` sends, in the shapes of `vllm bench serve`'s datasets.
//
// Prompts are token ids drawn from a pool of real token ids (the server's /tokenize of a built-in
// text), so the load generator needs no tokenizer of its own and every id is in the model's
// vocabulary; each prompt starts as the server starts a text prompt (its BOS, whatever the model,
// or nothing). Everything is seeded: the same options give the same requests.
//   random             input and output lengths uniform in [len * (1 - r), len * (1 + r)]
//   prefix-repetition  N shared prefixes, each request one of them plus its own suffix
//   mooncake           a Mooncake trace: its arrival times, and its hash ids turned into token
//                      blocks so equal ids share prefixes; lengths scaled to a small model
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv::loadgen {

// What synthetic prompts are made of: real token ids of the served model, and the tokens the
// server puts before every text prompt (BOS for llama2.c and most GGUF models; none for some).
struct TokenPool {
  std::vector<TokenId> ids;
  std::vector<TokenId> lead;
};

struct BenchRequest {
  std::vector<TokenId> prompt;
  int max_tokens = 0;
  std::optional<double> arrival_s;  // set by trace datasets; otherwise the arrival process decides
};

struct RandomDatasetOptions {
  int num_prompts = 200;
  int input_len = 64;
  int output_len = 64;
  double range_ratio = 0.0;  // in [0, 1)
};
std::vector<BenchRequest> random_dataset(const TokenPool& pool, const RandomDatasetOptions& o, uint64_t seed);

struct PrefixRepetitionOptions {
  int num_prompts = 200;
  int num_prefixes = 10;
  int prefix_len = 256;
  int suffix_len = 32;
  int output_len = 64;
};
std::vector<BenchRequest> prefix_repetition_dataset(const TokenPool& pool, const PrefixRepetitionOptions& o,
                                                    uint64_t seed);

struct MooncakeDatasetOptions {
  int num_prompts = 200;  // the first N records
  int block_tokens = 16;  // tokens each 512-token hash-id block becomes
  double time_scale = 1.0;  // arrival = trace timestamp x time_scale
  int max_model_len = 512;  // prompts are cut so that prompt + output fits
};
// Throws FormatError naming the file and line of a malformed record.
std::vector<BenchRequest> mooncake_dataset(const std::filesystem::path& trace, const TokenPool& pool,
                                           const MooncakeDatasetOptions& o, uint64_t seed);

}  // namespace pagedkv::loadgen
