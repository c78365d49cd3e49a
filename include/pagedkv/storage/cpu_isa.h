// Which instruction-set path the storage operations and the kernels run. The default build
// targets baseline x86-64; the AVX2+FMA+F16C translation units (src/**/*_avx2.cpp) are only
// entered after a run-time CPU check. Declared here, below kernels/, because storage's type
// conversions dispatch on it too (kernels/ includes storage/, never the other way round).
#pragma once

namespace pagedkv {

enum class KernelIsa { kAuto, kScalar, kAvx2 };

// Run-time CPU check (AVX2+FMA+F16C, and OS support for the YMM state): kAvx2 or kScalar.
// Setting the environment variable PAGEDKV_ISA=scalar forces kScalar (for comparisons).
KernelIsa best_available_isa();

// kAuto becomes best_available_isa(); kAvx2 on a CPU without it throws UsageError.
KernelIsa resolve_isa(KernelIsa requested);

const char* isa_name(KernelIsa isa);

}  // namespace pagedkv
