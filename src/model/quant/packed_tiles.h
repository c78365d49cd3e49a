// The per-ISA entry points of the packed-matmul tiles (packed_kernel.h), private to src/model.
#pragma once

#include <cstddef>

namespace pagedkv::packed_detail {

// Computes num_tokens x rows outputs from num_panels panels (see PackedMatrix::multiply).
void multiply_tiles_sse(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x,
                        size_t x_stride, int num_tokens, float* y, size_t y_stride, int rows);
void multiply_tiles_avx2(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x,
                         size_t x_stride, int num_tokens, float* y, size_t y_stride, int rows);
void multiply_tiles_avx512(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x,
                           size_t x_stride, int num_tokens, float* y, size_t y_stride, int rows);

}  // namespace pagedkv::packed_detail
