// The row-interleaved copy of a weight matrix that QuantizedMatrix's AVX-512 build multiplies (and
// its AVX2 build, for F16 / BF16, Q4_0 and the super-block types: float_panels_avx2.cpp,
// quantized_kernels_avx2.cpp, kquant_kernels_avx2.cpp), private to src/model. Made once at load
// time (a file's weights are repacked into anonymous memory, as llama.cpp's CPU back end repacks
// its Q4_0/Q8_0 weights); the file's own layout stays what the scalar twin and the AVX2 build of
// Q8_0 read.
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
//   IQ4_NL: as Q4_0 (the same 18-byte blocks: the nibbles index kIq4NlValues).
//   Q4_K / Q5_K / Q6_K / IQ4_XS / Q3_K / Q2_K (super-blocks of 256 columns): one chunk per
//     super-block, registers of 16 rows x 4 bytes (Q4_K / Q5_K / Q3_K / Q2_K: 4 consecutive bytes
//     of the row's block as the file stores them), no value changing size:
//       Q4_K: 32 registers of nibbles (register 8c + v: bytes 4v..4v+3 of qs[32c..]: low nibbles
//         columns 64c + 4v.., high nibbles 64c + 32 + 4v..), then the 12 packed scale bytes as 3
//         registers (bytes 0-3, 4-7, 8-11 of every row): 2240 bytes.
//       Q5_K: the nibbles as Q4_K, 8 registers of high bits (register v: qh[4v..4v+3], bit 2c of a
//         byte the fifth bit of the low nibble of register 8c + v, bit 2c + 1 of the high nibble),
//         the 3 registers of scales: 2752 bytes.
//       Q6_K: the levels 0..63 (the file's q + 32) rearranged, 3 bytes per 4 values: per 128
//         columns n and 4-column group v (0..7), registers 3(8n + v) + k (k = 0, 1, 2) hold, in
//         bits 0-5 of their bytes, the levels of columns 128n + 32k + 4v.., and in bits 6-7 bits
//         2k, 2k + 1 of the level of column 128n + 96 + 4v..: 48 registers, so that 3 of every 4
//         levels come out with one AND; then the int8 scales by sub-block: 16 bytes per
//         sub-block of 16 values, one per row: 3328 bytes.
//       IQ4_XS: 32 registers of nibbles (register g: bytes 4g..4g+3 of qs, i.e. sub-block g / 4's
//         columns 32(g / 4) + 4(g % 4).. in the low nibbles and 16 further in the high ones), then
//         the 4 bytes of scales_l as one register: 2112 bytes.
//       Q3_K: 16 registers of 2-bit low bits (register 8n + v: qs[32n + 4v..], bits 2j, 2j + 1 of
//         a byte those of column 128n + 32j + 4v..), 8 registers of high bits (register 16 + v:
//         hmask[4v..], bit 4n + j of a byte that of the same column), then the 12 packed scale
//         bytes as 3 registers: 1728 bytes.
//       Q2_K: the 2-bit levels as Q3_K's low bits (16 registers), then the 16 bytes of scales and
//         mins as 4 registers (bytes 4r..4r+3): 1280 bytes.
//     and per super-block the 16 rows' fp16 d (and dmin for Q4_K / Q5_K / Q2_K, the 16-bit
//     scales_h for IQ4_XS): 32 (64) bytes, right after the chunk (Q6_K, Q3_K: after the chunks of
//     a pair of super-blocks), so that a panel is one stream of whole 64-byte lines.
// Sizes are those of the file's rows (34 bytes per 32 Q8_0 values, 18 per 32 Q4_0 / IQ4_NL
// values, 144 / 176 / 210 / 136 / 110 / 84 per 256 Q4_K / Q5_K / Q6_K / IQ4_XS / Q3_K / Q2_K
// values) up to the padding, so a decode step reads as many bytes as from the file.
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
  size_t scales_at;  // Q8_0 / Q4_0 / IQ4_NL: where a panel's block scales start (0 for the others)

  // Bytes of one block's quants in a panel (Q8_0: 512, Q4_0 / IQ4_NL: 256; K-quants: the super-block's
  // chunk, quants and sub-block scales).
  static constexpr size_t quant_block_bytes(TensorType t) {
    switch (t) {
      case TensorType::kQ8_0:
        return 512;
      case TensorType::kQ4_K:
        return 35 * 64;
      case TensorType::kQ5_K:
        return 43 * 64;
      case TensorType::kQ6_K:
        return 52 * 64;
      case TensorType::kIQ4_XS:
        return 33 * 64;
      case TensorType::kQ3_K:
        return 27 * 64;
      case TensorType::kQ2_K:
        return 20 * 64;
      default:
        return 256;
    }
  }
  // Bytes of one block's scales in a panel: 16 fp16 d, plus 16 fp16 dmin for Q4_K / Q5_K / Q2_K or
  // 16 scales_h for IQ4_XS.
  static constexpr size_t scale_block_bytes(TensorType t) {
    return t == TensorType::kQ4_K || t == TensorType::kQ5_K || t == TensorType::kIQ4_XS || t == TensorType::kQ2_K ? 64
                                                                                                                  : 32;
  }
  // K-quants: super-blocks in groups of this many (Q6_K, Q3_K: 2, whose chunks and scales make
  // whole 64-byte lines), a group being its chunks, then their scale blocks.
  static constexpr int super_block_group(TensorType t) {
    return t == TensorType::kQ6_K || t == TensorType::kQ3_K ? 2 : 1;
  }
  // K-quants: offsets within a panel of super-block b's chunk and of its scale block.
  static constexpr size_t chunk_at(TensorType t, int b) {
    const int g = super_block_group(t);
    return static_cast<size_t>(b / g) * static_cast<size_t>(g) * (quant_block_bytes(t) + scale_block_bytes(t)) +
           static_cast<size_t>(b % g) * quant_block_bytes(t);
  }
  static constexpr size_t k_scales_at(TensorType t, int b, int super_blocks) {
    const int g = super_block_group(t), first = b / g * g;
    const int in_group = super_blocks - first < g ? super_blocks - first : g;
    return chunk_at(t, first) + static_cast<size_t>(in_group) * quant_block_bytes(t) +
           static_cast<size_t>(b % g) * scale_block_bytes(t);
  }
};

// True for the super-block types that have a panel layout (Q4_K, Q5_K, Q6_K, IQ4_XS).
constexpr bool is_panelled_k_quant(TensorType t) {
  return t == TensorType::kQ4_K || t == TensorType::kQ5_K || t == TensorType::kQ6_K || t == TensorType::kIQ4_XS;
}

// True for the low-bit super-block types that have a panel layout (Q3_K, Q2_K), multiplied by
// low_bit_kernels_avx512.cpp.
constexpr bool is_panelled_low_bit(TensorType t) { return t == TensorType::kQ3_K || t == TensorType::kQ2_K; }

// True for the types the AVX2 build also reads in panels: F16 and BF16 (float_panels_avx2.cpp), Q4_0
// (quantized_kernels_avx2.cpp) and every super-block type with a panel layout (kquant_kernels_avx2.cpp).
constexpr bool has_avx2_panels(TensorType t) {
  return t == TensorType::kF16 || t == TensorType::kBF16 || t == TensorType::kQ4_0 || is_panelled_k_quant(t) ||
         is_panelled_low_bit(t);
}

// True for the block formats of block_formats.h that have a panel layout (IQ4_NL: Q4_0's, multiplied
// with Q4_0's tiles).
constexpr bool is_panelled_block_format(TensorType t) {
  return is_panelled_k_quant(t) || is_panelled_low_bit(t) || t == TensorType::kIQ4_NL;
}

// The layout of a rows x cols matrix of `type` (F16, BF16, Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K,
// IQ4_XS, Q3_K or Q2_K).
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
