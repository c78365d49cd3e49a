// The worker-side block table of a batch: for each request row, the physical block ids that
// hold its tokens, in token order. Rows are updated incrementally as requests gain blocks
// (vLLM's worker BlockTable), so a decode step writes only the few new entries.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv {

// Dense [max_requests x max_blocks_per_request] int32 table, rows updated incrementally
// (vLLM's worker-side BlockTable). Unused entries are 0 (the reserved null block).
class BlockTable {
 public:
  BlockTable(int max_requests, int max_blocks_per_request);  // throws ConfigError if not positive

  // Appends to the end of `row`; throws UsageError if the row would exceed its capacity.
  void append_row(int row, std::span<const BlockId> new_blocks);
  // Replaces the whole row.
  void set_row(int row, std::span<const BlockId> blocks);
  // Rewrites one existing entry (copy-on-write, sliding window, swap-in); index < num_blocks(row).
  void set_entry(int row, int index, BlockId b);
  void clear_row(int row);
  // Row `dst` takes row `src`'s blocks; `src` becomes empty (condensing a batch after a finish).
  void move_row(int src, int dst);
  // Exchanges two rows (reordering a batch).
  void swap_rows(int a, int b);

  int num_blocks(int row) const;
  const int32_t* row(int row) const;
  int32_t* data() { return table_.data(); }
  const int32_t* data() const { return table_.data(); }
  int stride() const { return max_blocks_per_request_; }
  int max_requests() const { return max_requests_; }

 private:
  void check_row(int row) const;
  int max_requests_;
  int max_blocks_per_request_;
  std::vector<int32_t> table_;  // [max_requests][max_blocks_per_request]
  std::vector<int32_t> num_blocks_;  // [max_requests]
};

// slot = block_id * block_size + (position % block_size); the block is row[position / block_size].
// Writes num_tokens slots for positions [first_position, first_position + num_tokens).
void compute_slot_mapping(const int32_t* block_table_row, int block_size, int first_position, int num_tokens,
                          int64_t* slots_out);

}  // namespace pagedkv
