#include "pagedkv/model/forward_batch.h"

#include <algorithm>

#include <fmt/format.h>

#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

ForwardBatchBuilder::ForwardBatchBuilder(int block_size) : block_size_(block_size) {
  if (block_size <= 0) throw ConfigError(fmt::format("block_size must be positive, got {}", block_size));
}

void ForwardBatchBuilder::clear() {
  token_ids_.clear();
  positions_.clear();
  slots_.clear();
  query_start_.assign(1, 0);
  context_lens_.clear();
  logits_rows_.clear();
  tables_.clear();
}

int ForwardBatchBuilder::add_request(std::span<const TokenId> tokens, int first_position,
                                     std::span<const int32_t> block_ids, bool wants_logits) {
  if (tokens.empty()) throw UsageError("add_request: a request must run at least one token");
  if (first_position < 0) throw UsageError(fmt::format("add_request: first_position {} is negative", first_position));
  const int64_t end = static_cast<int64_t>(first_position) + static_cast<int64_t>(tokens.size());
  const int64_t blocks_needed = ceil_div<int64_t>(end, block_size_);
  if (static_cast<int64_t>(block_ids.size()) < blocks_needed)
    throw UsageError(fmt::format("add_request: positions up to {} need {} blocks of {} tokens, the block table has {}",
                                 end - 1, blocks_needed, block_size_, block_ids.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int p = first_position + static_cast<int>(i);
    token_ids_.push_back(tokens[i]);
    positions_.push_back(p);
    slots_.push_back(static_cast<int64_t>(block_ids[static_cast<size_t>(p / block_size_)]) * block_size_ +
                     p % block_size_);
  }
  query_start_.push_back(static_cast<int32_t>(token_ids_.size()));
  context_lens_.push_back(static_cast<int32_t>(end));
  if (wants_logits) logits_rows_.push_back(static_cast<int32_t>(token_ids_.size()) - 1);
  tables_.emplace_back(block_ids.begin(), block_ids.end());
  return num_requests() - 1;
}

ForwardBatch ForwardBatchBuilder::batch() {
  size_t stride = 1;
  for (const auto& t : tables_) stride = std::max(stride, t.size());
  dense_tables_.assign(tables_.size() * stride, 0);  // unused entries: the null block
  for (size_t r = 0; r < tables_.size(); ++r)
    std::copy(tables_[r].begin(), tables_[r].end(), dense_tables_.begin() + static_cast<std::ptrdiff_t>(r * stride));
  ForwardBatch b;
  b.token_ids = token_ids_;
  b.positions = positions_;
  b.slot_mapping = slots_;
  b.attention.num_requests = num_requests();
  b.attention.query_start = query_start_.data();
  b.attention.context_lens = context_lens_.data();
  b.attention.block_tables = dense_tables_.data();
  b.attention.block_table_stride = static_cast<int>(stride);
  b.logits_rows = logits_rows_;
  return b;
}

}  // namespace pagedkv
