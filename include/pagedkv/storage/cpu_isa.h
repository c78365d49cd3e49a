// Which instruction-set path the storage operations and the kernels run. The default build
// targets baseline x86-64; the AVX2+FMA+F16C translation units (src/**/*_avx2.cpp) and the
// AVX-512 ones (src/**/*_avx512.cpp) are only entered after a run-time CPU check. Declared here,
// below kernels/, because storage's type conversions dispatch on it too (kernels/ includes
// storage/, never the other way round).
#pragma once

namespace pagedkv {

// kAvx512 implies kAvx2: code with only an AVX2 path runs that path under kAvx512 (has_avx2()).
enum class KernelIsa { kAuto, kScalar, kAvx2, kAvx512 };

// Run-time CPU check, with OS support for the register state (XCR0):
//   kAvx512 = AVX2+FMA+F16C and AVX-512 F, VL, BW and DQ (ZMM and opmask state saved);
//   kAvx2   = AVX2+FMA+F16C (YMM state saved); otherwise kScalar.
// The environment variable PAGEDKV_ISA caps the choice for comparisons: "scalar" or "avx2".
KernelIsa best_available_isa();

// kAuto becomes best_available_isa(); a path this CPU lacks throws UsageError.
KernelIsa resolve_isa(KernelIsa requested);

// True for a resolved path that may run AVX2+FMA+F16C code (kAvx2 and kAvx512).
constexpr bool has_avx2(KernelIsa resolved) { return resolved == KernelIsa::kAvx2 || resolved == KernelIsa::kAvx512; }

// Integer dot-product instructions, for paths that have a plain-AVX2/AVX-512 fallback (the int8
// attention): AVX512-VNNI (with kAvx512) and AVX-VNNI (the VEX form, with kAvx2). Both are false
// when PAGEDKV_VNNI=0, which lets the fallbacks be compared on a CPU that has VNNI.
bool has_avx512_vnni();
bool has_avx_vnni();
// What the CPU (and OS) offers, whatever PAGEDKV_VNNI says: for a build that has no same-result
// fallback to compare against (QuantizedMatrix's AVX-512 build needs VNNI, else AVX2 runs).
bool cpu_has_avx512_vnni();
bool cpu_has_avx_vnni();
// AVX512-BF16 (vdpbf16ps, with kAvx512's features), and whether the CPU is AMD's: where a faster
// instruction changes results (QuantizedMatrix's BF16 products), the choice follows the vendor's
// measured rates rather than the feature flag alone.
bool cpu_has_avx512_bf16();
bool cpu_is_amd();

const char* isa_name(KernelIsa isa);

// The inverse of isa_name for "auto", "scalar", "avx2" and "avx512"; anything else throws
// ConfigError naming `what` (the option or setting being parsed).
KernelIsa parse_isa(const char* name, const char* what);

}  // namespace pagedkv
