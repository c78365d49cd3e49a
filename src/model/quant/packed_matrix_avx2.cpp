// The AVX2 build of the packed-matmul tiles (8 lanes: one ymm register per panel column).
// Entered only after best_available_isa() reported AVX2. FMA contraction is off so that every
// output is still rounded after each multiply and each add, bit-identical to the baseline build
// and to llama2.c's scalar matmul.
#pragma GCC optimize("fp-contract=off")

#include "packed_kernel.h"
#include "packed_tiles.h"

namespace pagedkv::packed_detail {

// 4 tokens x 2 panels = 8 accumulators of 8 floats, plus 2 weight vectors and a broadcast:
// 11 of the 16 ymm registers. A lone token walks 4 panels at a time (8 measured about 15%
// slower in bench_model).
void multiply_tiles_avx2(const float* panels, size_t panel_stride, int num_panels, int cols, const float* x,
                         size_t x_stride, int num_tokens, float* y, size_t y_stride, int rows) {
  PackedKernel<8>::run<4, 2, 4>(panels, panel_stride, num_panels, cols, x, x_stride, num_tokens, y, y_stride, rows);
}

}  // namespace pagedkv::packed_detail
