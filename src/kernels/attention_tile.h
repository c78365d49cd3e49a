// Private to the paged-attention kernels: the unit of work that the driver (paged_attention.cpp)
// hands to an ISA-specific kernel (attention_tile_scalar.cpp; attention_tile_avx2.cpp and
// attention_tile_avx512.cpp, both instances of attention_tile_simd.h).
//
// A task is a range of context tokens of one request and, for each of a few consecutive KV heads,
// the query rows that read that head (the query heads of its GQA group, times a few query tokens).
// The kernel reads the range once, a tile of kTileTokens tokens at a time, found through the
// request's block table: consecutive tokens, or, for decode over scattered blocks, a few tokens
// from each of four parts of the range (TileWalk in attention_tile_simd.h); within a tile it
// handles the heads one after the other, so with all heads in one task each slot is read whole.
// It keeps an online softmax per row and returns the unnormalised sum of exp(score - max) *
// value, the max and the sum of exp(score - max), so that partial results over disjoint token
// ranges merge exactly (flash-decoding).
#pragma once

#include <cstdint>

#include "pagedkv/storage/kv_arena.h"

namespace pagedkv::attention_detail {

// Context tokens per tile: one head's tile of K and V stays in L1, and 24 is a whole number of
// the 3-token score blocks (attention_tile_avx2.cpp). Measured 16-64: 24 best from DRAM.
constexpr int kTileTokens = 24;

struct RowGroupTask {
  const KVLayerView* kv = nullptr;
  const int32_t* block_table = nullptr;  // the request's row of the block table
  int first_kv_head = 0;
  int num_kv_heads = 1;                 // heads first_kv_head, first_kv_head + 1, ...
  int token_begin = 0, token_end = 0;  // context tokens this task reads, [begin, end)
  int num_rows = 0;                     // query rows per KV head
  const float* query = nullptr;         // [num_kv_heads][num_rows][head_dim], times the scale
  const int32_t* row_begin = nullptr;   // [num_rows] first position each row may attend to
  const int32_t* row_end = nullptr;     // [num_rows] one past the last position it may attend to
  bool rows_share_range = false;        // all rows attend to [token_begin, token_end): no masking
  float logit_softcap = 0;              // 0 = none
  // Outputs, [num_kv_heads][num_rows] and [num_kv_heads][num_rows][head_dim]. A row that
  // attended to no token of the range has max = -inf, sum = 0 and a zero accumulator.
  float* acc = nullptr;
  float* row_max = nullptr;
  float* row_sum = nullptr;
};

void attend_rows_scalar(const RowGroupTask& task);
// Requires head_dim % 8 == 0 and a CPU with AVX2+FMA+F16C.
void attend_rows_avx2(const RowGroupTask& task);
// Requires head_dim % 16 == 0 and a CPU with AVX-512 F/VL/BW/DQ (KernelIsa::kAvx512).
void attend_rows_avx512(const RowGroupTask& task);

}  // namespace pagedkv::attention_detail
