#include "pagedkv/storage/block_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "pagedkv/core/error.h"

namespace pagedkv {

BlockTable::BlockTable(int max_requests, int max_blocks_per_request)
    : max_requests_(max_requests), max_blocks_per_request_(max_blocks_per_request) {
  if (max_requests <= 0)
    throw ConfigError(fmt::format("block table max_requests must be positive, got {}", max_requests));
  if (max_blocks_per_request <= 0)
    throw ConfigError(
        fmt::format("block table max_blocks_per_request must be positive, got {}", max_blocks_per_request));
  table_.assign(static_cast<size_t>(max_requests) * static_cast<size_t>(max_blocks_per_request), 0);
  num_blocks_.assign(static_cast<size_t>(max_requests), 0);
}

void BlockTable::check_row(int row) const {
  if (row < 0 || row >= max_requests_)
    throw UsageError(fmt::format("block table row {} out of range [0, {})", row, max_requests_));
}

void BlockTable::append_row(int row, std::span<const BlockId> new_blocks) {
  check_row(row);
  const auto r = static_cast<size_t>(row);
  const size_t have = static_cast<size_t>(num_blocks_[r]);
  if (have + new_blocks.size() > static_cast<size_t>(max_blocks_per_request_))
    throw UsageError(fmt::format("block table row {} would hold {} blocks, more than its capacity of {}", row,
                                 have + new_blocks.size(), max_blocks_per_request_));
  int32_t* out = table_.data() + r * static_cast<size_t>(max_blocks_per_request_) + have;
  for (size_t i = 0; i < new_blocks.size(); ++i) out[i] = new_blocks[i].value;
  num_blocks_[r] = static_cast<int32_t>(have + new_blocks.size());
}

void BlockTable::set_row(int row, std::span<const BlockId> blocks) {
  clear_row(row);
  append_row(row, blocks);
}

void BlockTable::set_entry(int row, int index, BlockId b) {
  check_row(row);
  if (index < 0 || index >= num_blocks(row))
    throw UsageError(fmt::format("block table entry {} of row {} out of range: the row holds {} blocks", index, row,
                                 num_blocks(row)));
  table_[static_cast<size_t>(row) * static_cast<size_t>(max_blocks_per_request_) + static_cast<size_t>(index)] =
      b.value;
}

void BlockTable::clear_row(int row) {
  check_row(row);
  int32_t* r = table_.data() + static_cast<size_t>(row) * static_cast<size_t>(max_blocks_per_request_);
  std::fill(r, r + num_blocks_[static_cast<size_t>(row)], 0);
  num_blocks_[static_cast<size_t>(row)] = 0;
}

void BlockTable::move_row(int src, int dst) {
  check_row(src);
  check_row(dst);
  if (src == dst) return;
  const auto stride = static_cast<size_t>(max_blocks_per_request_);
  const int32_t* from = table_.data() + static_cast<size_t>(src) * stride;
  int32_t* to = table_.data() + static_cast<size_t>(dst) * stride;
  std::copy(from, from + stride, to);
  num_blocks_[static_cast<size_t>(dst)] = num_blocks_[static_cast<size_t>(src)];
  clear_row(src);
}

void BlockTable::swap_rows(int a, int b) {
  check_row(a);
  check_row(b);
  const auto stride = static_cast<size_t>(max_blocks_per_request_);
  std::swap_ranges(table_.data() + static_cast<size_t>(a) * stride, table_.data() + static_cast<size_t>(a + 1) * stride,
                   table_.data() + static_cast<size_t>(b) * stride);
  std::swap(num_blocks_[static_cast<size_t>(a)], num_blocks_[static_cast<size_t>(b)]);
}

int BlockTable::num_blocks(int row) const {
  check_row(row);
  return num_blocks_[static_cast<size_t>(row)];
}

const int32_t* BlockTable::row(int row) const {
  check_row(row);
  return table_.data() + static_cast<size_t>(row) * static_cast<size_t>(max_blocks_per_request_);
}

void compute_slot_mapping(const int32_t* block_table_row, int block_size, int first_position, int num_tokens,
                          int64_t* slots_out) {
  if (block_size <= 0) throw UsageError(fmt::format("block_size must be positive, got {}", block_size));
  if (first_position < 0) throw UsageError(fmt::format("first_position must be non-negative, got {}", first_position));
  int block_index = first_position / block_size;
  int offset = first_position % block_size;
  for (int i = 0; i < num_tokens; ++i) {
    slots_out[i] = static_cast<int64_t>(block_table_row[block_index]) * block_size + offset;
    if (++offset == block_size) {
      offset = 0;
      ++block_index;
    }
  }
}

}  // namespace pagedkv
