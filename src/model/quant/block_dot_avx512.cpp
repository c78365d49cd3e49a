// The AVX-512 (VL, with VNNI's vpdpbusd) build of the block formats' products (block_dot_simd.h),
// entered only after the run-time check in QuantizedMatrix.
#include "block_dot_simd.h"

namespace pagedkv::quant_detail {

const BlockRowsKernel& avx512_block_kernel() {
  static const BlockRowsKernel k{simd_block_rows};
  return k;
}

}  // namespace pagedkv::quant_detail
