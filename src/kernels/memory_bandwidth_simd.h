// Private: the AVX2 read loop (memory_bandwidth_avx2.cpp). data must be 32-byte aligned.
#pragma once

#include <cstddef>

namespace pagedkv::detail {

float sum_floats_avx2(const float* data, size_t n);

}  // namespace pagedkv::detail
