// Weight quantizers for the K-quant and IQ4_XS formats of block_formats.h: how the random-weight
// files of the benchmarks get the types users download (Q4_K_M and friends). Each is a plain
// one-pass rule, not llama.cpp's search for the best scales (its files are a little more accurate
// for real weights; for random weights and for speed measurements the format is what matters):
//   Q4_K / Q5_K  per 32 values: the range [min(0, lo), hi] in 15 / 31 steps; the steps and the
//                mins as 6-bit multiples of the super-block's d and dmin (fp16).
//   Q6_K         per 16 values: max|x| / 31 per step, as an int8 multiple of d (fp16).
//   IQ4_XS       per 32 values: a step that maps the largest magnitude onto the level table's end
//                (-127 or 113), as a 6-bit multiple of d (fp16); each value to its nearest level.
// Dequantizing (dequantize_blocks) gives back the values within about half a step.
#pragma once

#include <span>

#include "pagedkv/model/format/tensor_type.h"

namespace pagedkv {

// True for the types quantize_weight_row writes.
bool can_quantize_weights(TensorType t);

// Quantizes one row (x.size() a multiple of 256) into x.size() / 256 blocks of `t` at `out`.
// Throws UsageError for another type or a row that is not whole blocks.
void quantize_weight_row(TensorType t, std::span<const float> x, void* out);

}  // namespace pagedkv
