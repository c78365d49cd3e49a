// hadamard_rotate_rows: picks the rotation's build (apart from key_rotation.cpp, which targets
// without the SIMD builds link alone, e.g. the tiers' fuzzers).
#include "kv_quantize_simd.h"
#include "pagedkv/storage/key_rotation.h"

namespace pagedkv {

void hadamard_rotate_rows(float* x, size_t rows, size_t n, KernelIsa isa) {
  const KernelIsa resolved = resolve_isa(isa);
  if (resolved == KernelIsa::kAvx512) return detail::hadamard_rotate_rows_avx512(x, rows, n);
  if (has_avx2(resolved)) return detail::hadamard_rotate_rows_avx2(x, rows, n);
  for (size_t r = 0; r < rows; ++r) hadamard_rotate(x + r * n, n);
}

}  // namespace pagedkv
