// Private to the paged-attention kernels: the kernel for a cascade group's prefix task, whose
// row group stacks the G query rows of every member (up to kMaxWideRows rows per KV head) and
// attends them all to the same shared range (RowGroupTask::rows_share_range).
//
// With that many rows the task is compute-bound, and the row-group kernel (attention_tile.h),
// which reduces one dot product per (row, token) across the lanes of a vector, leaves most of the
// FMA units idle in horizontal sums and per-row softmax steps. This kernel puts the rows in the
// lanes instead, a small matrix product per tile of kTileTokens tokens and per KV head:
//   - the scaled query, transposed once per task to [dim][rows] (rows padded to a whole number
//     of vectors with zero rows, whose results are dropped);
//   - each key and value row converted to f32 once per tile, then every element of it broadcast
//     against the vectors of rows: S[token][rows] = sum_d K[token][d] * Q^T[d][rows];
//   - the online softmax lane-wise: a running max and sum per row, exp as vector_exp.h;
//   - O^T[d][rows] += sum_token V[token][d] * P[token][rows], in strips of dimensions whose
//     accumulators stay in registers while the tile's tokens pass.
// Its scalar twin (attention_wide_rows_scalar.cpp) walks the same tiles with the same arithmetic
// in the same order (products unfused), one row at a time; it is the reference the AVX-512 build
// is tested against.
// f32, f16 and bf16 K/V without a logit soft-cap; the driver keeps the row-group kernel for the rest.
#pragma once

#include "attention_tile.h"

namespace pagedkv::attention_detail {

// Rows per KV head from which the prefix task takes this kernel: fewer rows leave vector lanes
// empty, where the row-group kernel's horizontal sums cost less. At most kMaxWideRows (four
// 16-lane vectors of rows: the register blocks below are sized for them).
constexpr int kMinWideRows = 16;
constexpr int kMaxWideRows = 64;

// Whether the kernel serves this task's storage type and options.
inline bool wide_rows_fit(const RowGroupTask& task) {
  const DType t = task.kv->dtype;
  return task.rows_share_range && task.logit_softcap == 0 && task.num_rows >= kMinWideRows &&
         task.num_rows <= kMaxWideRows && (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16);
}

void attend_wide_rows_scalar(const RowGroupTask& task);
// Requires head_dim % 16 == 0 and a CPU with AVX-512 F/VL/BW/DQ (KernelIsa::kAvx512).
void attend_wide_rows_avx512(const RowGroupTask& task);

}  // namespace pagedkv::attention_detail
