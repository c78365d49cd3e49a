// Private: the AVX2+F16C bulk conversions (float_convert_avx2.cpp). Only call them after
// has_avx2(resolve_isa(...)) holds (kAvx2 or kAvx512).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedkv::detail {

void f32_to_f16_avx2(const float* src, uint16_t* dst, size_t n);
void f16_to_f32_avx2(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16_avx2(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32_avx2(const uint16_t* src, float* dst, size_t n);

}  // namespace pagedkv::detail
