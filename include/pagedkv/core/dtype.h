// Element types of KV storage, and their sizes.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace pagedkv {

enum class DType { kF32, kF16, kBF16, kFP8, kInt8, kInt4 };

constexpr size_t dtype_bits(DType t) {
  switch (t) {
    case DType::kF32:
      return 32;
    case DType::kF16:
      return 16;
    case DType::kBF16:
      return 16;
    case DType::kFP8:
      return 8;
    case DType::kInt8:
      return 8;
    case DType::kInt4:
      return 4;
  }
  return 0;
}

// Bytes of `n` elements (int4 packs two per byte; n is rounded up).
constexpr size_t dtype_bytes(DType t, size_t n) { return (n * dtype_bits(t) + 7) / 8; }

// The quantized KV formats, int8 and fp8 (e4m3), store each token's row of one KV head with one
// f32 scale of its own (value = scale * code): these are the bytes of that scale.
constexpr size_t kKVScaleBytes = 4;
constexpr bool dtype_has_row_scale(DType t) { return t == DType::kInt8 || t == DType::kFP8; }

std::string_view dtype_name(DType t);
// Accepts fp32/f32/float32, fp16/f16/float16/half, bf16/bfloat16, fp8/fp8_e4m3, int8, int4.
std::optional<DType> parse_dtype(std::string_view s);

}  // namespace pagedkv
