// The gate of a SwiGLU feed-forward block: out[i] = silu(gate[i]) * up[i], where silu(g) =
// g * (1 / (1 + e^-g)), e^x the kernels' vector exponential (about 1 ulp; llama.cpp's CPU back end
// also takes a polynomial exp here). A decode step of 32 tokens through a 1B model gates 4 M values;
// with libm's scalar expf that was 6-7 % of the step. The AVX2 and AVX-512 builds give the scalar
// twin's bits for every input (test_gated_activation).
#pragma once

#include <cstddef>

#include "pagedkv/storage/cpu_isa.h"

namespace pagedkv {

// out may alias gate or up. `isa`: kScalar runs the twin, kAvx2 / kAvx512 (or kAuto resolving to
// them) their builds.
void silu_gate(const float* gate, const float* up, float* out, size_t n, KernelIsa isa = KernelIsa::kAuto);

}  // namespace pagedkv
