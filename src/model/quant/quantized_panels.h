// The row-interleaved copy of a weight matrix that QuantizedMatrix's AVX-512 build multiplies,
// private to src/model. Made once at load time (a file's weights are repacked into anonymous
// memory, as llama.cpp's CPU back end repacks its Q4_0/Q8_0 weights); the file's own layout stays
// what the scalar twin and the AVX2 build read.
//
// Rows are grouped in panels of 16, so that one 512-bit register holds the same columns of 16
// rows: a broadcast activation then meets 16 rows in one instruction and the result lands as 16
// outputs of one token, with no horizontal sums, and the float work (block scales) is done once
// per 16 rows instead of once per row. A panel is one contiguous stream of bytes (a single decode
// token reads it front to back), its size a multiple of 64. The last panel of a matrix whose row
// count is not a multiple of 16 is padded with zero rows.
//
//   F16: column k of the panel's 16 rows as 16 consecutive 16-bit values (32 bytes); with an odd
//     column count the padding to 64 bytes is a zero column (the tiles read two columns a step).
//   BF16: columns in pairs, 64 bytes a pair: 16 lanes of 32 bits, lane i holding row i's columns
//     2j (low half) and 2j + 1 (high half), so that one shift and one mask widen two columns (a
//     BF16 value is the top half of its f32); an odd column count is padded with a zero column.
//   Q8_0: first the quants of every block, 512 bytes each: 8 groups of 4 columns, each group 16
//     rows x 4 bytes (64 bytes, one register; vpdpbusd's 4-byte lanes), stored as w + 128 (an
//     unsigned byte, vpdpbusd's unsigned operand); then the block scales, 16 F16 values (32 bytes)
//     per block.
//   Q4_0: first the quants of every block, 256 bytes each: 4 registers of 16 rows x 4 bytes, byte j
//     of row i in register v being the file's byte 4v + j of that row's block (low nibble: column
//     4v + j, high nibble: column 16 + 4v + j, both 0..15, i.e. w + 8); then the scales as for Q8_0.
// Sizes are those of the file's rows (34 bytes per 32 Q8_0 values, 18 per 32 Q4_0 values) up to the
// padding, so a decode step reads as many bytes as from the file.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedkv/model/format/tensor_type.h"
#include "pagedkv/model/transformer_weights.h"

namespace pagedkv::quant_detail {

inline constexpr int kPanelRows = 16;

struct PanelLayout {
  TensorType type;
  int rows, cols;
  int panels;  // ceil(rows / 16)
  size_t panel_bytes;  // stride from one panel to the next, a multiple of 64
  size_t scales_at;  // Q8_0 / Q4_0: where a panel's block scales start (0 for F16 / BF16)

  // Bytes of one block's quants in a panel (Q8_0: 512, Q4_0: 256).
  static constexpr size_t quant_block_bytes(TensorType t) { return t == TensorType::kQ8_0 ? 512 : 256; }
};

// The layout of a rows x cols matrix of `type` (F16, BF16, Q8_0 or Q4_0).
PanelLayout panel_layout(TensorType type, int rows, int cols);

// Writes `w` in the panel layout to `out` (layout.panels * layout.panel_bytes bytes, 64-byte
// aligned); panels [p0, p1) only, so that threads can share the work.
void repack_panels(const WeightTensor& w, const PanelLayout& layout, int p0, int p1, std::byte* out);

// The weights as the AVX-512 build reads them.
struct WeightPanels {
  PanelLayout layout;
  const std::byte* base;  // panel p starts at base + p * layout.panel_bytes
};

}  // namespace pagedkv::quant_detail
