// Private to gated_activation*.cpp: the SIMD builds' entries, called by silu_gate
// (gated_activation.cpp) after the run-time check. Both leave the n % 8 (AVX2) or n % 16
// (AVX-512) last values to the caller's scalar twin, which gives the same bits.
#pragma once

#include <cstddef>

namespace pagedkv::detail {

size_t silu_gate_avx2(const float* gate, const float* up, float* out, size_t n);  // returns the values done
size_t silu_gate_avx512(const float* gate, const float* up, float* out, size_t n);

}  // namespace pagedkv::detail
