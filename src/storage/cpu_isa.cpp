#include "pagedkv/storage/cpu_isa.h"

#include <cpuid.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

// The OS must save the vector registers on a context switch, not only the CPU support them:
// xgetbv reads which state components it saves (XCR0).
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

struct CpuFeatures {
  bool avx2 = false;  // AVX2 + FMA + F16C, YMM state saved
  bool avx512 = false;  // and AVX-512 F/VL/BW/DQ, opmask + ZMM state saved
  bool avx512_vnni = false;  // with avx512
  bool avx_vnni = false;  // with avx2
  bool avx512_bf16 = false;  // with avx512
  bool amd = false;  // vendor "AuthenticAMD"
};

CpuFeatures query_cpu() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) != 0)  // the vendor string is ebx, edx, ecx
    f.amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return f;
  const bool fma = (ecx & (1u << 12)) != 0;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  const bool avx = (ecx & (1u << 28)) != 0;
  const bool f16c = (ecx & (1u << 29)) != 0;
  if (!(fma && osxsave && avx && f16c)) return f;
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & 0x6u) != 0x6u) return f;  // SSE and AVX state
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return f;
  f.avx2 = (ebx & (1u << 5)) != 0;
  const bool avx512f = (ebx & (1u << 16)) != 0, avx512dq = (ebx & (1u << 17)) != 0;
  const bool avx512bw = (ebx & (1u << 30)) != 0, avx512vl = (ebx & (1u << 31)) != 0;
  f.avx512 = f.avx2 && avx512f && avx512dq && avx512bw && avx512vl && (xcr0 & 0xe6u) == 0xe6u;  // + opmask, ZMM
  f.avx512_vnni = f.avx512 && (ecx & (1u << 11)) != 0;
  unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
  if (__get_cpuid_count(7, 1, &eax1, &ebx1, &ecx1, &edx1) != 0) {
    f.avx_vnni = f.avx2 && (eax1 & (1u << 4)) != 0;
    f.avx512_bf16 = f.avx512 && (eax1 & (1u << 5)) != 0;
  }
  return f;
}

// cpuid is slow under a hypervisor (it traps): ask once.
const CpuFeatures& cpu() {
  static const CpuFeatures features = query_cpu();
  return features;
}

KernelIsa detect() {
  const KernelIsa hardware = cpu().avx512 ? KernelIsa::kAvx512 : cpu().avx2 ? KernelIsa::kAvx2 : KernelIsa::kScalar;
  const char* forced = std::getenv("PAGEDKV_ISA");
  if (forced == nullptr || *forced == '\0') return hardware;
  const std::string_view cap(forced);
  if (cap == "scalar") return KernelIsa::kScalar;
  if (cap == "avx2" && hardware == KernelIsa::kAvx512) return KernelIsa::kAvx2;
  return hardware;  // "avx512", "auto" or unknown: what the CPU has
}

bool vnni_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("PAGEDKV_VNNI");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return allowed;
}

}  // namespace

bool cpu_has_avx512_vnni() { return cpu().avx512_vnni; }
bool has_avx512_vnni() { return cpu_has_avx512_vnni() && vnni_allowed(); }
bool cpu_has_avx_vnni() { return cpu().avx_vnni; }
bool has_avx_vnni() { return cpu_has_avx_vnni() && vnni_allowed(); }
bool cpu_has_avx512_bf16() { return cpu().avx512_bf16; }
bool cpu_is_amd() { return cpu().amd; }

KernelIsa best_available_isa() {
  static const KernelIsa best = detect();
  return best;
}

KernelIsa resolve_isa(KernelIsa requested) {
  switch (requested) {
    case KernelIsa::kAuto:
      return best_available_isa();
    case KernelIsa::kScalar:
      return KernelIsa::kScalar;
    case KernelIsa::kAvx2:
      if (!cpu().avx2) throw UsageError("the AVX2 kernel path was requested but this CPU lacks AVX2, FMA or F16C");
      return KernelIsa::kAvx2;
    case KernelIsa::kAvx512:
      if (!cpu().avx512)
        throw UsageError("the AVX-512 kernel path was requested but this CPU (or OS) lacks AVX-512 F/VL/BW/DQ");
      return KernelIsa::kAvx512;
  }
  throw UsageError("unknown KernelIsa value");
}

const char* isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAuto:
      return "auto";
    case KernelIsa::kScalar:
      return "scalar";
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

KernelIsa parse_isa(const char* name, const char* what) {
  for (KernelIsa isa : {KernelIsa::kAuto, KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512})
    if (std::string_view(name) == isa_name(isa)) return isa;
  throw ConfigError(fmt::format("{} must be auto, scalar, avx2 or avx512, got '{}'", what, name));
}

}  // namespace pagedkv
