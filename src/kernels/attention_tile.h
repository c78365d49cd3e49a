// Private to the paged-attention kernels: the unit of work that the driver (paged_attention.cpp)
// hands to an ISA-specific kernel (attention_tile_scalar.cpp; attention_tile_avx2.cpp,
// attention_tile_avx512.cpp and their int8-only VNNI builds attention_tile_vnni_avx2.cpp and
// attention_tile_vnni_avx512.cpp, all instances of attention_tile_simd.h).
//
// A task is a range of context tokens of one request and, for each of a few consecutive KV heads,
// the query rows that read that head (the query heads of its GQA group, times a few query tokens).
// The kernel reads the range once, a tile of kTileTokens tokens at a time, found through the
// request's block table: consecutive tokens, or, for decode over scattered blocks, a few tokens
// from each of four or eight parts of the range (TileWalk in attention_tile_walk.h); within a tile it
// handles the heads one after the other, so with all heads in one task each slot is read whole.
// It keeps an online softmax per row and returns the unnormalised sum of exp(score - max) *
// value, the max and the sum of exp(score - max), so that partial results over disjoint token
// ranges merge exactly (flash-decoding).
//
// int8 K/V are read with integer dot products on every path (the scalar twin does the same
// integer arithmetic, walks the same tiles and takes the same exp, so the paths agree but for
// the order of f32 sums):
//   - scores: the driver quantizes each query row once to int16 codes with a scale of its own
//     (query ~ query_scale * code, step amax / 32767); a key row is k_scale[t] * code_k +
//     k_offset[t] (storage/kv_quantize.h), so q . k = query_scale * k_scale[t] *
//     sum(code_q * code_k) + k_offset[t] * query_sum, the sum exact in int32 (AVX512-VNNI /
//     AVX-VNNI vpdpwssd, or vpmaddwd) and query_sum the f32 sum of the query row's elements;
//   - values: per tile and row, the weights w[t] = p[t] * v_scale[t] (>= 0) are quantized to
//     unsigned 8-bit codes (step max_t w[t] / 255) and sum_t w8[t] * code_v[t][d] is taken
//     exactly in int32, four tokens per instruction (vpdpbusd), then added to the f32
//     accumulator times the weights' step.
// The query's rounding is a relative step of 2^-15 of its largest element, 250x finer than the
// int8 codes'; the weights' 2^-8 of the tile's largest weight is about the keys' and values' own
// step (its cost, measured with pagedkv bench kv-dtype: docs/quantized_kv.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedkv/kernels/query_codes.h"  // padded_query_dim, query_code_max
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv::attention_detail {

// Context tokens per tile: one head's tile of K and V stays in L1, and 24 is a whole number of
// the 3-token score blocks (attention_tile_avx2.cpp). Measured 16-64: 24 best from DRAM.
constexpr int kTileTokens = 24;

// int8 K/V: the largest code of a tile's weights (unsigned 8-bit; see above).
constexpr float kWeightCodeMax = 255.0f;
struct RowGroupTask {
  const KVLayerView* kv = nullptr;
  const int32_t* block_table = nullptr;  // the request's row of the block table
  int first_kv_head = 0;
  int num_kv_heads = 1;  // heads first_kv_head, first_kv_head + 1, ...
  int token_begin = 0, token_end = 0;  // context tokens this task reads, [begin, end)
  int num_rows = 0;  // query rows per KV head
  const float* query = nullptr;  // [num_kv_heads][num_rows][head_dim], times the scale (not int8)
  // int8 K/V only: the query as int16 codes, rows padded_query_dim(head_dim) apart, and a scale
  // per row (query = query_scale * code).
  const int16_t* query_codes = nullptr;  // [num_kv_heads][num_rows][padded_query_dim(head_dim)]
  const float* query_scale = nullptr;  // [num_kv_heads][num_rows]
  const float* query_sum = nullptr;  // [num_kv_heads][num_rows] sum of the row's elements (f32)
  const int32_t* row_begin = nullptr;  // [num_rows] first position each row may attend to
  const int32_t* row_end = nullptr;  // [num_rows] one past the last position it may attend to
  bool rows_share_range = false;  // all rows attend to [token_begin, token_end): no masking
  float logit_softcap = 0;  // 0 = none
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
// int8 K/V only, the integer dot products with VNNI: AVX-VNNI (has_avx_vnni()) on the AVX2 path,
// AVX512-VNNI (has_avx512_vnni()) on the AVX-512 one. Without VNNI the two entries above use
// vpmaddwd + vpaddd, with the same results.
void attend_rows_avx2_vnni(const RowGroupTask& task);
void attend_rows_avx512_vnni(const RowGroupTask& task);

}  // namespace pagedkv::attention_detail
