// The query side of int8 attention: each query row as int16 codes with one scale and the sum
// of its elements (the int8 kernels' arithmetic: src/kernels/attention_tile.h).
//
// A row is multiplied by the softmax scale, rotated like int8 keys are (storage/key_rotation.h:
// (H q) . (H k) = q . k) when `rotate`, and quantized symmetrically, step amax / code_max,
// rounded to nearest even; its sum (f32, in eight interleaved partial sums added as a tree,
// the same order on every path) multiplies each key row's offset. The paged-attention driver
// makes every query row's codes once per call with the SIMD version; the scalar twin gives the
// same bits for every input (test_attention_query_codes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedkv/storage/cpu_isa.h"

namespace pagedkv {

// Query codes are stored in rows padded with zeros to a multiple of this many elements (one
// AVX-512 vector of int16), so the kernels read whole vectors.
inline constexpr size_t kQueryCodeAlign = 32;
constexpr size_t padded_query_dim(size_t dim) {
  return (dim + kQueryCodeAlign - 1) / kQueryCodeAlign * kQueryCodeAlign;
}

// The largest query code for a head dimension: |sum code_q * code_k| <= dim * max * 128 must fit
// in int32 (32767 up to head_dim 512; wider heads get a coarser query).
constexpr int query_code_max(size_t dim) { return dim <= 512 ? 32767 : static_cast<int>(2147483647 / (128 * dim)); }

struct QueryRowCodes {
  float scale = 0;  // query ~ scale * code; 0 for a zero row, NaN for a row with a NaN or an infinity
  float sum = 0;  // sum of the scaled (and rotated) row's elements
};

// Codes of one row of `dim` elements into codes[0, padded_query_dim(dim)) (the padding zero;
// all zero for a zero or non-finite row). `rotate` requires a power-of-two dim up to
// kMaxRotatedHeadDim. `isa`: kScalar runs the twin; kAvx2 / kAvx512 (or kAuto resolving to
// them) the AVX2 version where dim % 8 == 0, else the twin.
QueryRowCodes make_query_row_codes(const float* query, size_t dim, float softmax_scale, bool rotate, int16_t* codes,
                                   KernelIsa isa = KernelIsa::kAuto);

}  // namespace pagedkv
