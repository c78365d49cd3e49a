#include "quantized_panels.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv::quant_detail {
namespace {

size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }

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
      if (cols % kQuantBlock != 0)
        throw UsageError(fmt::format("panel layout: {} columns are not whole blocks of {}", cols, kQuantBlock));
      l.scales_at = blocks * PanelLayout::quant_block_bytes(type);
      l.panel_bytes = round_up_64(l.scales_at + blocks * kPanelRows * sizeof(uint16_t));
      break;
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
        default: {  // Q4_0
          auto* scales = reinterpret_cast<uint16_t*>(panel + l.scales_at);
          const auto* src = static_cast<const BlockQ4_0*>(row);
          for (int b = 0; b < blocks; ++b) {
            for (int v = 0; v < 4; ++v) {
              std::byte* dst =
                  panel + static_cast<size_t>(b) * 256 + static_cast<size_t>(v) * 64 + static_cast<size_t>(i) * 4;
              if (real) std::memcpy(dst, src[b].q + 4 * v, 4);
              else std::memset(dst, 0x88, 4);  // nibbles 8 - 8: two zero weights per byte
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
