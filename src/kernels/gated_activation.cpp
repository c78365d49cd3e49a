// silu_gate: the dispatch and the scalar twin (the SIMD builds: gated_activation_avx2.cpp and
// gated_activation_avx512.cpp).
#include "pagedkv/kernels/gated_activation.h"

#include "gated_activation_simd.h"
#include "vector_exp.h"

namespace pagedkv {
namespace {

// The SIMD builds' operations for one lane, in their order.
void silu_gate_scalar(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * (1.0f / (1.0f + kernels_detail::exp_as_simd(-g))) * up[i];
  }
}

}  // namespace

void silu_gate(const float* gate, const float* up, float* out, size_t n, KernelIsa isa) {
  const KernelIsa resolved = resolve_isa(isa);
  size_t done = 0;
  if (resolved == KernelIsa::kAvx512) done = detail::silu_gate_avx512(gate, up, out, n);
  else if (resolved == KernelIsa::kAvx2) done = detail::silu_gate_avx2(gate, up, out, n);
  silu_gate_scalar(gate + done, up + done, out + done, n - done);
}

}  // namespace pagedkv
