#include "pagedkv/storage/float_convert.h"

#include <fmt/format.h>

#include <cstring>

#include "convert_simd.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

void convert_from_f32(DType dst_type, const float* src, void* dst, size_t n, KernelIsa isa) {
  const bool simd = has_avx2(resolve_isa(isa));
  switch (dst_type) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      if (simd) return detail::f32_to_f16_avx2(src, out, n);
      for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      if (simd) return detail::f32_to_bf16_avx2(src, out, n);
      for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    }
    default:
      throw UsageError(
          fmt::format("cannot convert f32 to {}: KV storage holds f32, f16 or bf16", dtype_name(dst_type)));
  }
}

void convert_to_f32(DType src_type, const void* src, float* dst, size_t n, KernelIsa isa) {
  const bool simd = has_avx2(resolve_isa(isa));
  switch (src_type) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      if (simd) return detail::f16_to_f32_avx2(in, dst, n);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(in[i]);
      return;
    }
    case DType::kBF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      if (simd) return detail::bf16_to_f32_avx2(in, dst, n);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(in[i]);
      return;
    }
    default:
      throw UsageError(
          fmt::format("cannot convert {} to f32: KV storage holds f32, f16 or bf16", dtype_name(src_type)));
  }
}

}  // namespace pagedkv
