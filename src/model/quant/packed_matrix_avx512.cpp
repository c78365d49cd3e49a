// The AVX-512 build of the packed-matmul tiles. Vectors stay 8 floats wide (a panel is 8 rows;
// AVX-512VL's ymm forms), but the 32 registers hold 8 tokens x 2 panels = 16 accumulators, so
// each loaded panel column serves twice the tokens of the AVX2 build. Entered only after
// best_available_isa() reported AVX-512. FMA contraction is off: every output is rounded after
// each multiply and each add, bit-identical to the other builds and to llama2.c's matmul.
#pragma GCC optimize("fp-contract=off")

#include "packed_kernel.h"
#include "packed_tiles.h"

namespace pagedkv::packed_detail {

void multiply_tiles_avx512(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x,
                           size_t x_stride, int num_tokens, float* y, size_t y_stride, int rows) {
  PackedKernel<8>::run<8, 2, 4>(panels, panel_stride, num_panels, cols, x, x_stride, num_tokens, y, y_stride, rows);
}

}  // namespace pagedkv::packed_detail
