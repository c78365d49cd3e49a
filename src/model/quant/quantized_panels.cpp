#include "quantized_panels.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/block_formats.h"

namespace pagedkv::quant_detail {
namespace {

size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }

// Row i of a K-quant / IQ4_XS panel, super-blocks from `src` (null: a padding row, all zero bytes
// already). Q4_K / Q5_K / IQ4_XS: every register of a chunk takes 4 bytes of the block, from the
// offsets listed here; Q6_K: its levels rearranged as quantized_panels.h says.
void repack_k_quant_row(const PanelLayout& l, const std::byte* src, int i, std::byte* panel) {
  if (src == nullptr) return;  // zero nibbles, scales and d: a zero row
  const int blocks = l.cols / kSuperBlock;
  const size_t block_bytes = tensor_row_bytes(l.type, kSuperBlock);
  // Byte offsets within a Q4_K / Q5_K block of: the nibbles, the high bits (Q5_K), the packed
  // scales; the number of registers of high bits.
  const bool five = l.type == TensorType::kQ5_K;
  const int nibbles_at = five ? 48 : 16, high_at = 16, scales_at = 4, high_registers = five ? 8 : 0;
  const size_t row_at = static_cast<size_t>(i) * 4;
  for (int b = 0; b < blocks; ++b) {
    const std::byte* blk = src + static_cast<size_t>(b) * block_bytes;
    std::byte* dst = panel + PanelLayout::chunk_at(l.type, b);
    int g = 0;
    if (l.type == TensorType::kQ6_K) {
      // Columns 128n + 32s + 4v + j (s = 0..3) as three bytes: q_s = low nibble | high bits << 4
      // (0..63) in bits 0-5 of byte j of registers 3(8n + v) + 0, 1, 2 for s = 0, 1, 2, and q_3's
      // bits 0-1, 2-3, 4-5 in bits 6-7 of those three bytes.
      const auto* ql = reinterpret_cast<const uint8_t*>(blk);
      const uint8_t* qh = ql + 128;
      for (int n = 0; n < 2; ++n)
        for (int v = 0; v < 8; ++v)
          for (int j = 0; j < 4; ++j) {
            int q[4];
            for (int s = 0; s < 4; ++s) {
              const int low = (ql[64 * n + 32 * (s % 2) + 4 * v + j] >> (s < 2 ? 0 : 4)) & 0xF;
              q[s] = low | (((qh[32 * n + 4 * v + j] >> (2 * s)) & 3) << 4);
            }
            std::byte* at = dst + static_cast<size_t>(3 * (8 * n + v)) * 64 + row_at + static_cast<size_t>(j);
            for (int k = 0; k < 3; ++k) at[64 * k] = static_cast<std::byte>(q[k] | (((q[3] >> (2 * k)) & 3) << 6));
          }
      g = 48;
    } else if (l.type == TensorType::kIQ4_XS) {
      for (int v = 0; v < 32; ++v, ++g)
        std::memcpy(dst + g * 64 + row_at, blk + offsetof(BlockIQ4_XS, qs) + 4 * static_cast<size_t>(v), 4);
      std::memcpy(dst + g * 64 + row_at, blk + offsetof(BlockIQ4_XS, scales_l), 4);
      std::byte* d = panel + PanelLayout::k_scales_at(l.type, b, blocks);
      std::memcpy(d + 2 * i, blk + offsetof(BlockIQ4_XS, d), 2);
      std::memcpy(d + 32 + 2 * i, blk + offsetof(BlockIQ4_XS, scales_h), 2);
      continue;
    } else {
      for (int v = 0; v < 32; ++v, ++g) std::memcpy(dst + g * 64 + row_at, blk + nibbles_at + 4 * v, 4);
      for (int v = 0; v < high_registers; ++v, ++g) std::memcpy(dst + g * 64 + row_at, blk + high_at + 4 * v, 4);
    }
    std::byte* d = panel + PanelLayout::k_scales_at(l.type, b, blocks);
    if (l.type == TensorType::kQ6_K) {
      for (int s = 0; s < 16; ++s)
        dst[static_cast<size_t>(g) * 64 + static_cast<size_t>(s) * 16 + static_cast<size_t>(i)] =
            blk[offsetof(BlockQ6_K, scales) + static_cast<size_t>(s)];
      std::memcpy(d + 2 * i, blk + offsetof(BlockQ6_K, d), 2);
    } else {
      for (int v = 0; v < 3; ++v, ++g) std::memcpy(dst + g * 64 + row_at, blk + scales_at + 4 * v, 4);
      std::memcpy(d + 2 * i, blk, 2);  // d
      std::memcpy(d + 32 + 2 * i, blk + 2, 2);  // dmin
    }
  }
}

// Row i of a Q3_K / Q2_K panel, super-blocks from `src` (null: a padding row, all zero bytes
// already): every register of a chunk takes 4 bytes of the block, in the order quantized_panels.h
// lists them.
void repack_low_bit_row(const PanelLayout& l, const std::byte* src, int i, std::byte* panel) {
  if (src == nullptr) return;
  const int blocks = l.cols / kSuperBlock;
  const size_t block_bytes = tensor_row_bytes(l.type, kSuperBlock);
  const bool three = l.type == TensorType::kQ3_K;
  // The file's byte ranges, 4 bytes per register, in register order; then d (and dmin).
  const size_t qs_at = three ? offsetof(BlockQ3_K, qs) : offsetof(BlockQ2_K, qs);
  const size_t d_at = three ? offsetof(BlockQ3_K, d) : offsetof(BlockQ2_K, d);
  const struct {
    size_t at;
    int registers;
  } ranges[] = {{qs_at, 16},
                {three ? offsetof(BlockQ3_K, hmask) : offsetof(BlockQ2_K, scales), three ? 8 : 4},
                {offsetof(BlockQ3_K, scales), three ? 3 : 0}};
  const size_t row_at = static_cast<size_t>(i) * 4;
  for (int b = 0; b < blocks; ++b) {
    const std::byte* blk = src + static_cast<size_t>(b) * block_bytes;
    std::byte* dst = panel + PanelLayout::chunk_at(l.type, b);
    int g = 0;
    for (const auto& range : ranges)
      for (int v = 0; v < range.registers; ++v, ++g)
        std::memcpy(dst + static_cast<size_t>(g) * 64 + row_at, blk + range.at + 4 * static_cast<size_t>(v), 4);
    std::byte* d = panel + PanelLayout::k_scales_at(l.type, b, blocks);
    std::memcpy(d + 2 * i, blk + d_at, 2);
    if (!three) std::memcpy(d + 32 + 2 * i, blk + offsetof(BlockQ2_K, dmin), 2);
  }
}

}  // namespace

PanelLayout panel_layout(TensorType type, int rows, int cols) {
  PanelLayout l{type, rows, cols, (rows + kPanelRows - 1) / kPanelRows, 0, 0};
  const size_t blocks = static_cast<size_t>(cols / kQuantBlock);
  switch (type) {
    case TensorType::kF16:
      l.panel_bytes = round_up_64(static_cast<size_t>(cols) * kPanelRows * sizeof(uint16_t));
      break;
    case TensorType::kBF16:  // pairs of columns: an odd count gets a zero column
      l.panel_bytes = static_cast<size_t>((cols + 1) / 2) * kPanelRows * 2 * sizeof(uint16_t);
      break;
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kIQ4_NL:
      if (cols % kQuantBlock != 0)
        throw UsageError(fmt::format("panel layout: {} columns are not whole blocks of {}", cols, kQuantBlock));
      l.scales_at = blocks * PanelLayout::quant_block_bytes(type);
      l.panel_bytes = round_up_64(l.scales_at + blocks * kPanelRows * sizeof(uint16_t));
      break;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_XS:
    case TensorType::kQ3_K:
    case TensorType::kQ2_K: {
      if (cols % kSuperBlock != 0)
        throw UsageError(fmt::format("panel layout: {} columns are not whole blocks of {}", cols, kSuperBlock));
      const size_t super_blocks = static_cast<size_t>(cols / kSuperBlock);
      l.panel_bytes =
          round_up_64(super_blocks * (PanelLayout::quant_block_bytes(type) + PanelLayout::scale_block_bytes(type)));
      break;
    }
    default:
      throw UsageError(fmt::format("panel layout: {} weights are not supported", tensor_type_name(type)));
  }
  return l;
}

void repack_panels(const WeightTensor& w, const PanelLayout& l, int p0, int p1, std::byte* out) {
  const int blocks = l.cols / kQuantBlock;
  for (int p = p0; p < p1; ++p) {
    std::byte* panel = out + static_cast<size_t>(p) * l.panel_bytes;
    std::memset(panel, 0, l.panel_bytes);  // padding rows: zero weights and zero scales
    const int rows_here = std::min(kPanelRows, l.rows - p * kPanelRows);
    for (int i = 0; i < kPanelRows; ++i) {
      const bool real = i < rows_here;
      const void* row = real ? w.row(static_cast<int64_t>(p) * kPanelRows + i) : nullptr;
      switch (l.type) {
        case TensorType::kQ4_K:
        case TensorType::kQ5_K:
        case TensorType::kQ6_K:
        case TensorType::kIQ4_XS:
          repack_k_quant_row(l, static_cast<const std::byte*>(row), i, panel);
          break;
        case TensorType::kQ3_K:
        case TensorType::kQ2_K:
          repack_low_bit_row(l, static_cast<const std::byte*>(row), i, panel);
          break;
        case TensorType::kF16: {
          if (!real) break;  // zero bits are 0.0
          const auto* src = static_cast<const uint16_t*>(row);
          auto* dst = reinterpret_cast<uint16_t*>(panel);
          for (int k = 0; k < l.cols; ++k) dst[static_cast<size_t>(k) * kPanelRows + static_cast<size_t>(i)] = src[k];
          break;
        }
        case TensorType::kBF16: {
          if (!real) break;
          // Column k of row i: 16-bit value k % 2 of lane i of pair k / 2.
          const auto* src = static_cast<const uint16_t*>(row);
          auto* dst = reinterpret_cast<uint16_t*>(panel);
          for (int k = 0; k < l.cols; ++k)
            dst[static_cast<size_t>(k / 2) * kPanelRows * 2 + static_cast<size_t>(i) * 2 + static_cast<size_t>(k % 2)] =
                src[k];
          break;
        }
        case TensorType::kQ8_0: {
          if (!real) {  // w + 128 = 128: a zero weight (its scale is zero too)
            for (int b = 0; b < blocks; ++b)
              for (int g = 0; g < 8; ++g)
                std::memset(
                    panel + static_cast<size_t>(b) * 512 + static_cast<size_t>(g) * 64 + static_cast<size_t>(i) * 4,
                    0x80, 4);
            break;
          }
          const auto* src = static_cast<const BlockQ8_0*>(row);
          auto* scales = reinterpret_cast<uint16_t*>(panel + l.scales_at);
          for (int b = 0; b < blocks; ++b) {
            for (int g = 0; g < 8; ++g) {
              // 4 values at once: w + 128 is w with its sign bit flipped.
              uint32_t four;
              std::memcpy(&four, src[b].q + 4 * g, 4);
              four ^= 0x80808080u;
              std::memcpy(
                  panel + static_cast<size_t>(b) * 512 + static_cast<size_t>(g) * 64 + static_cast<size_t>(i) * 4,
                  &four, 4);
            }
            scales[static_cast<size_t>(b) * kPanelRows + static_cast<size_t>(i)] = src[b].d;
          }
          break;
        }
        default: {  // Q4_0, IQ4_NL (the same blocks: d, then the nibbles)
          static_assert(sizeof(BlockIQ4_NL) == sizeof(BlockQ4_0) &&
                        offsetof(BlockIQ4_NL, qs) == offsetof(BlockQ4_0, q));
          auto* scales = reinterpret_cast<uint16_t*>(panel + l.scales_at);
          const auto* src = static_cast<const BlockQ4_0*>(row);
          for (int b = 0; b < blocks; ++b) {
            for (int v = 0; v < 4; ++v) {
              std::byte* dst =
                  panel + static_cast<size_t>(b) * 256 + static_cast<size_t>(v) * 64 + static_cast<size_t>(i) * 4;
              if (real) std::memcpy(dst, src[b].q + 4 * v, 4);
              else std::memset(dst, 0x88, 4);  // Q4_0: nibbles 8 - 8, zero weights (IQ4_NL: its d is 0)
            }
            if (real) scales[static_cast<size_t>(b) * kPanelRows + static_cast<size_t>(i)] = src[b].d;
          }
          break;
        }
      }
    }
  }
}

}  // namespace pagedkv::quant_detail
