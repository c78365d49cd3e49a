#include "pagedkv/storage/cpu_isa.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

// The OS must save the YMM registers on a context switch (XCR0 bits 1 and 2), not only the CPU
// support AVX: xgetbv reads that register.
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool query_cpu() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool fma = (ecx & (1u << 12)) != 0;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  const bool avx = (ecx & (1u << 28)) != 0;
  const bool f16c = (ecx & (1u << 29)) != 0;
  if (!(fma && osxsave && avx && f16c)) return false;
  if ((read_xcr0() & 0x6u) != 0x6u) return false;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ebx & (1u << 5)) != 0;  // AVX2
}

// cpuid is slow under a hypervisor (it traps): ask once.
bool cpu_has_avx2_fma_f16c() {
  static const bool has = query_cpu();
  return has;
}

KernelIsa detect() {
  if (const char* forced = std::getenv("PAGEDKV_ISA"); forced != nullptr && std::string_view(forced) == "scalar")
    return KernelIsa::kScalar;
  return cpu_has_avx2_fma_f16c() ? KernelIsa::kAvx2 : KernelIsa::kScalar;
}

}  // namespace

KernelIsa best_available_isa() {
  static const KernelIsa best = detect();
  return best;
}

KernelIsa resolve_isa(KernelIsa requested) {
  switch (requested) {
    case KernelIsa::kAuto: return best_available_isa();
    case KernelIsa::kScalar: return KernelIsa::kScalar;
    case KernelIsa::kAvx2:
      if (!cpu_has_avx2_fma_f16c())
        throw UsageError("the AVX2 kernel path was requested but this CPU lacks AVX2, FMA or F16C");
      return KernelIsa::kAvx2;
  }
  throw UsageError("unknown KernelIsa value");
}

const char* isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAuto: return "auto";
    case KernelIsa::kScalar: return "scalar";
    case KernelIsa::kAvx2: return "avx2";
  }
  return "?";
}

}  // namespace pagedkv
