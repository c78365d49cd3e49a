#include "pagedkv/storage/kv_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/key_rotation.h"
#include "pagedkv/storage/kv_quantize.h"
#include "kv_quantize_simd.h"

namespace pagedkv {
namespace {

std::byte* slot_address(void* plane, const KVLayerView& layer, int64_t slot) {
  return static_cast<std::byte*>(plane) + static_cast<size_t>(slot) * layer.slot_bytes();
}

// The int8 keys of one token, every head, with the AVX-512 or AVX2 builds: the rows (rotated
// where the format says, several at once) go to quantize_key_rows_int8_* up to kRowsAtOnce at a
// time, which searches several together; the same bytes as quantize_key_row_int8 row by row.
void quantize_key_slot_simd(const KVLayerView& layer, const float* src, std::byte* slot, bool rotate, bool avx512) {
  constexpr int kRowsAtOnce = 8;
  const auto dim = static_cast<size_t>(layer.head_dim);
  float rotated[kRowsAtOnce * kMaxRotatedHeadDim];
  uint32_t packed[kRowsAtOnce];
  for (int h0 = 0; h0 < layer.num_kv_heads; h0 += kRowsAtOnce) {
    const auto rows = static_cast<size_t>(std::min(kRowsAtOnce, layer.num_kv_heads - h0));
    const float* x = src + static_cast<size_t>(h0) * dim;
    if (rotate) {
      std::memcpy(rotated, x, rows * dim * sizeof(float));
      if (avx512) {
        detail::hadamard_rotate_rows_avx512(rotated, rows, dim);
      } else {
        detail::hadamard_rotate_rows_avx2(rotated, rows, dim);
      }
      x = rotated;
    }
    auto* codes = reinterpret_cast<int8_t*>(slot + static_cast<size_t>(h0) * dim);
    if (avx512) {
      detail::quantize_key_rows_int8_avx512(x, rows, dim, codes, packed);
    } else {
      detail::quantize_key_rows_int8_avx2(x, rows, dim, codes, packed);
    }
    std::memcpy(slot + layer.rows_bytes() + static_cast<size_t>(h0) * kKVScaleBytes, packed, rows * kKVScaleBytes);
  }
}

// int8/fp8: quantizes one token's row of every head into the slot, the scales after the rows;
// keys as H k where the format rotates them (storage/key_rotation.h). int8 keys carry an offset
// as well (quantize_key_row_int8: f16 scale and offset in the row's 4 bytes; the keys carry the
// accuracy loss), values and fp8 one f32 scale. isa is resolved: the int8 builds (AVX-512,
// AVX2, else the references) are picked here, not per row (kv_quantize_simd.h).
void quantize_slot(const KVLayerView& layer, const float* src, std::byte* slot, bool keys, KernelIsa isa) {
  const auto dim = static_cast<size_t>(layer.head_dim);
  float rotated[kMaxRotatedHeadDim];
  const bool rotate = keys && keys_are_rotated(layer.dtype, layer.head_dim);
  const bool offset = keys && int8_keys_have_offsets(layer.dtype);
  const bool avx512 = isa == KernelIsa::kAvx512;
  if (offset && has_avx2(isa)) {  // int8 keys: the heads' rows searched several at once
    quantize_key_slot_simd(layer, src, slot, rotate, avx512);
    return;
  }
  for (int h = 0; h < layer.num_kv_heads; ++h) {
    const float* row = src + static_cast<size_t>(h) * dim;
    if (rotate) {  // rotated keys are int8 keys: here only without AVX2 (above otherwise)
      std::memcpy(rotated, row, dim * sizeof(float));
      hadamard_rotate(rotated, dim);
      row = rotated;
    }
    std::byte* codes = slot + static_cast<size_t>(h) * dim;
    std::byte* scale_bytes = slot + layer.rows_bytes() + static_cast<size_t>(h) * kKVScaleBytes;
    auto* int8_codes = reinterpret_cast<int8_t*>(codes);
    if (offset) {
      const uint32_t packed = detail::quantize_key_row_int8_sse2(row, dim, int8_codes);  // no AVX2 here
      std::memcpy(scale_bytes, &packed, kKVScaleBytes);
      continue;
    }
    const bool int8 = layer.dtype == DType::kInt8;
    const float scale = int8 && avx512 ? detail::quantize_value_row_int8_avx512(row, dim, int8_codes)
                        : int8 && isa == KernelIsa::kAvx2
                            ? detail::quantize_value_row_int8_avx2(row, dim, int8_codes)
                            : quantize_row(layer.dtype, row, dim, codes, KernelIsa::kScalar);
    std::memcpy(scale_bytes, &scale, kKVScaleBytes);
  }
}

void dequantize_slot(const KVLayerView& layer, const std::byte* slot, float* dst, bool keys) {
  const auto dim = static_cast<size_t>(layer.head_dim);
  const bool rotate = keys && keys_are_rotated(layer.dtype, layer.head_dim);
  const bool offset = keys && int8_keys_have_offsets(layer.dtype);
  for (int h = 0; h < layer.num_kv_heads; ++h) {
    const std::byte* scale_bytes = slot + layer.rows_bytes() + static_cast<size_t>(h) * kKVScaleBytes;
    float* row = dst + static_cast<size_t>(h) * dim;
    const std::byte* codes = slot + static_cast<size_t>(h) * dim;
    if (offset) {
      uint32_t packed;
      std::memcpy(&packed, scale_bytes, kKVScaleBytes);
      const KeyScaleOffset so = unpack_key_scale_offset(packed);
      const auto* in = reinterpret_cast<const int8_t*>(codes);
      for (size_t i = 0; i < dim; ++i) row[i] = so.scale * static_cast<float>(in[i]) + so.offset;
    } else {
      float scale;
      std::memcpy(&scale, scale_bytes, kKVScaleBytes);
      dequantize_row(layer.dtype, codes, scale, dim, row);
    }
    if (rotate) hadamard_rotate(row, dim);  // H H k = k
  }
}

void check_block(BlockId b, int num_blocks, const char* what) {
  if (b.value < 0 || b.value >= num_blocks)
    throw UsageError(fmt::format("{} block {} out of range: the arena has {} blocks", what, b.value, num_blocks));
}

void check_view(const KVLayerView& layer) {
  if (layer.key == nullptr || layer.value == nullptr || !is_storage_dtype(layer.dtype) || layer.block_size <= 0 ||
      layer.num_kv_heads <= 0 || layer.head_dim <= 0)
    throw UsageError("invalid KV layer view (null planes, unsupported dtype or a non-positive dimension)");
}

}  // namespace

void write_kv(const KVLayerView& layer, const float* key, const float* value, const int64_t* slot_mapping,
              int num_tokens, KernelIsa requested_isa) {
  check_view(layer);
  const KernelIsa isa = resolve_isa(requested_isa);
  const size_t row = layer.token_stride_elems();
  const auto num_slots = static_cast<int64_t>(layer.num_slots());
  for (int t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot == -1) continue;  // padding token
    if (slot < 0 || slot >= num_slots)
      throw UsageError(fmt::format("write_kv: slot {} of token {} out of range [0, {})", slot, t, num_slots));
    const size_t src = static_cast<size_t>(t) * row;
    if (dtype_has_row_scale(layer.dtype)) {
      quantize_slot(layer, key + src, slot_address(layer.key, layer, slot), /*keys=*/true, isa);
      quantize_slot(layer, value + src, slot_address(layer.value, layer, slot), /*keys=*/false, isa);
      continue;
    }
    convert_from_f32(layer.dtype, key + src, slot_address(layer.key, layer, slot), row, isa);
    convert_from_f32(layer.dtype, value + src, slot_address(layer.value, layer, slot), row, isa);
  }
}

void copy_blocks(KVArena& arena, std::span<const std::pair<BlockId, BlockId>> src_dst) {
  for (const auto& [src, dst] : src_dst) {
    check_block(src, arena.num_blocks(), "copy_blocks source");
    check_block(dst, arena.num_blocks(), "copy_blocks destination");
  }
  for (int l = 0; l < arena.num_layers(); ++l) {
    const KVLayerView layer = arena.layer(l);
    const size_t block_bytes = layer.block_bytes();
    for (void* plane : {layer.key, layer.value}) {
      auto* base = static_cast<std::byte*>(plane);
      for (const auto& [src, dst] : src_dst) {
        if (src == dst) continue;
        std::memcpy(base + static_cast<size_t>(dst.value) * block_bytes,
                    base + static_cast<size_t>(src.value) * block_bytes, block_bytes);
      }
    }
  }
}

void copy_blocks_between(const KVArena& src, KVArena& dst, std::span<const std::pair<BlockId, BlockId>> src_dst) {
  const KVCacheSpec& a = src.spec();
  const KVCacheSpec& b = dst.spec();
  if (src.num_layers() != dst.num_layers() || a.dtype != b.dtype || a.block_size != b.block_size ||
      a.num_kv_heads != b.num_kv_heads || a.head_dim != b.head_dim)
    throw UsageError(fmt::format(
        "copy_blocks_between: arenas differ (layers {} vs {}, {} vs {}, block_size {} vs {}, kv heads {} vs {}, "
        "head_dim {} vs {})",
        src.num_layers(), dst.num_layers(), dtype_name(a.dtype), dtype_name(b.dtype), a.block_size, b.block_size,
        a.num_kv_heads, b.num_kv_heads, a.head_dim, b.head_dim));
  for (const auto& [s, d] : src_dst) {
    check_block(s, src.num_blocks(), "copy_blocks_between source");
    check_block(d, dst.num_blocks(), "copy_blocks_between destination");
  }
  for (int l = 0; l < src.num_layers(); ++l) {
    const KVLayerView from = src.layer(l);
    const KVLayerView to = dst.layer(l);
    const size_t block_bytes = from.block_bytes();
    for (const auto& [s, d] : src_dst) {
      const size_t from_off = static_cast<size_t>(s.value) * block_bytes;
      const size_t to_off = static_cast<size_t>(d.value) * block_bytes;
      std::memcpy(static_cast<std::byte*>(to.key) + to_off, static_cast<const std::byte*>(from.key) + from_off,
                  block_bytes);
      std::memcpy(static_cast<std::byte*>(to.value) + to_off, static_cast<const std::byte*>(from.value) + from_off,
                  block_bytes);
    }
  }
}

void gather_kv(const KVLayerView& layer, const int32_t* block_table_row, int num_tokens, float* key_out,
               float* value_out) {
  check_view(layer);
  const KernelIsa isa = best_available_isa();
  const size_t row = layer.token_stride_elems();
  for (int t = 0; t < num_tokens; ++t) {
    const int32_t block = block_table_row[t / layer.block_size];
    if (block < 0 || block >= layer.num_blocks)
      throw UsageError(fmt::format("gather_kv: block {} of token {} out of range [0, {})", block, t, layer.num_blocks));
    const int64_t slot = static_cast<int64_t>(block) * layer.block_size + t % layer.block_size;
    const size_t dst = static_cast<size_t>(t) * row;
    if (dtype_has_row_scale(layer.dtype)) {
      dequantize_slot(layer, slot_address(layer.key, layer, slot), key_out + dst, /*keys=*/true);
      dequantize_slot(layer, slot_address(layer.value, layer, slot), value_out + dst, /*keys=*/false);
      continue;
    }
    convert_to_f32(layer.dtype, slot_address(layer.key, layer, slot), key_out + dst, row, isa);
    convert_to_f32(layer.dtype, slot_address(layer.value, layer, slot), value_out + dst, row, isa);
  }
}

}  // namespace pagedkv
