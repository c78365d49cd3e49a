// The input of one model step (ForwardBatch), its output (Logits), and a builder that assembles
// the flattened arrays from per-request pieces.
//
// A step runs T tokens grouped by request (vLLM v1 style): request i owns rows
// [query_start[i], query_start[i+1]) of every per-token array, at consecutive positions ending at
// context_lens[i] - 1. ModelRunner::forward documents how each array is used.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/kernels/paged_attention.h"

namespace pagedkv {

// The block tables and slot mapping of one more KV-cache group (ModelConfig::kv_cache_group),
// for models whose sliding-window and full-attention layers keep separate block tables.
struct KVGroupTables {
  const int32_t* block_tables = nullptr;  // [num_requests][block_table_stride]
  int block_table_stride = 0;
  std::span<const int64_t> slot_mapping;  // [T]
};

struct ForwardBatch {
  std::span<const TokenId> token_ids;  // [T]
  std::span<const int32_t> positions;  // [T]
  std::span<const int64_t> slot_mapping;  // [T] block_id * block_size + position % block_size; -1 = skip
  PagedAttentionBatch attention;  // covers exactly rows 0..T-1
  std::span<const int32_t> logits_rows;  // row indices in [0, T), any order, may be empty
  // Groups 1.. of a model with several KV-cache groups (the fields above are group 0's); empty
  // for a model with one group.
  std::span<const KVGroupTables> extra_groups;
};

// Logits of the requested rows: row(i) belongs to logits_rows[i]. Valid until the next forward.
struct Logits {
  const float* data = nullptr;  // [num_rows][vocab_size]
  int num_rows = 0;
  int vocab_size = 0;
  std::span<const float> row(int i) const {
    return {data + static_cast<size_t>(i) * static_cast<size_t>(vocab_size), static_cast<size_t>(vocab_size)};
  }
};

// Collects one step's requests and lays them out as a ForwardBatch. Reuse one builder across
// steps (clear() keeps the buffers):
//     builder.clear();
//     for (each scheduled request r)
//       builder.add_request(r.new_tokens, r.num_computed, r.block_ids, /*wants_logits=*/r.samples);
//     Logits out = runner.forward(builder.batch(), arena);   // out.row(k): the k-th request that
//                                                            // asked for logits, in add order
class ForwardBatchBuilder {
 public:
  explicit ForwardBatchBuilder(int block_size);  // throws ConfigError if not positive

  void clear();

  // Appends a request running `tokens` at positions [first_position, first_position + size):
  // the next chunk of its prompt, or its one decode token. `block_ids` is its whole block table
  // (token at position p lives in block_ids[p / block_size]) and must cover every new position.
  // With wants_logits the request's last row joins logits_rows. Returns the request's index.
  // Throws UsageError for no tokens, a negative position or a block table that is too short.
  int add_request(std::span<const TokenId> tokens, int first_position, std::span<const int32_t> block_ids,
                  bool wants_logits);

  int num_requests() const { return static_cast<int>(context_lens_.size()); }
  int num_tokens() const { return static_cast<int>(token_ids_.size()); }

  // Views into the builder: valid until the next add_request() or clear().
  ForwardBatch batch();

 private:
  int block_size_;
  std::vector<TokenId> token_ids_;
  std::vector<int32_t> positions_;
  std::vector<int64_t> slots_;
  std::vector<int32_t> query_start_{0};
  std::vector<int32_t> context_lens_;
  std::vector<int32_t> logits_rows_;
  std::vector<std::vector<int32_t>> tables_;  // per request, as given
  std::vector<int32_t> dense_tables_;  // [requests][stride], built by batch()
};

}  // namespace pagedkv
