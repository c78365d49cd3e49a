#include "pagedkv/prefix/sha256.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "sha256_constants.h"

namespace pagedkv {
namespace {

using sha256_detail::kInitial;
using sha256_detail::kRoundConstants;

// PAGEDKV_SHA256 picks a path for comparisons: "openssl" (no hardware path), "sha-extensions"
// (no AVX-512 lanes); unset or anything else: the best this CPU has.
std::string_view forced_path() {
  const char* forced = std::getenv("PAGEDKV_SHA256");
  return forced == nullptr ? std::string_view() : std::string_view(forced);
}

bool query_hardware() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool ssse3 = (ecx & (1u << 9)) != 0, sse41 = (ecx & (1u << 19)) != 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool sha = (ebx & (1u << 29)) != 0;
  if (forced_path() == "openssl") return false;
  return ssse3 && sse41 && sha;
}

// AVX-512 F and BW, with the OS saving the opmask and ZMM state (XCR0 bits 1, 2, 5, 6, 7).
// PAGEDKV_ISA=scalar or avx2 (the kernels' cap, storage/cpu_isa.h) turns it off too.
bool query_avx512() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0xe6u) != 0xe6u) return false;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool f = (ebx & (1u << 16)) != 0, bw = (ebx & (1u << 30)) != 0;
  const std::string_view path = forced_path();
  if (path == "openssl" || path == "sha-extensions") return false;
  const char* isa = std::getenv("PAGEDKV_ISA");
  if (isa != nullptr && (std::string_view(isa) == "scalar" || std::string_view(isa) == "avx2")) return false;
  return f && bw;
}

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#define PAGEDKV_SHA_TARGET __attribute__((target("sha,ssse3,sse4.1")))

// The SHA instructions keep the eight working variables in two registers: ABEF (a in the top
// lane, f in the bottom) and CDGH. SHA256RNDS2 runs two rounds and returns the new ABEF; the
// new CDGH is the old ABEF. Lanes are independent messages: the loops over `l` put their
// rounds side by side, so the out-of-order core overlaps their latency chains.
template <int N>
PAGEDKV_SHA_TARGET void compress_lanes(const std::byte* const* messages, size_t num_blocks, std::byte* const* digests) {
  const __m128i to_big_endian = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
  __m128i abef[N], cdgh[N];
  for (int l = 0; l < N; ++l) {
    abef[l] = _mm_set_epi32(static_cast<int>(kInitial[0]), static_cast<int>(kInitial[1]), static_cast<int>(kInitial[4]),
                            static_cast<int>(kInitial[5]));
    cdgh[l] = _mm_set_epi32(static_cast<int>(kInitial[2]), static_cast<int>(kInitial[3]), static_cast<int>(kInitial[6]),
                            static_cast<int>(kInitial[7]));
  }
  for (size_t block = 0; block < num_blocks; ++block) {
    __m128i w[4][N];  // message schedule, four words a group; group g lives in w[g % 4]
    __m128i abef0[N], cdgh0[N];
    for (int l = 0; l < N; ++l) {
      const auto* p = reinterpret_cast<const __m128i*>(messages[l] + block * 64);
      for (int q = 0; q < 4; ++q) w[q][l] = _mm_shuffle_epi8(_mm_loadu_si128(p + q), to_big_endian);
      abef0[l] = abef[l];
      cdgh0[l] = cdgh[l];
    }
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(kRoundConstants + 4 * g));
      for (int l = 0; l < N; ++l) {
        if (g >= 4) {
          // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four words at a time.
          const __m128i t = _mm_add_epi32(_mm_sha256msg1_epu32(w[g & 3][l], w[(g + 1) & 3][l]),
                                          _mm_alignr_epi8(w[(g + 3) & 3][l], w[(g + 2) & 3][l], 4));
          w[g & 3][l] = _mm_sha256msg2_epu32(t, w[(g + 3) & 3][l]);
        }
        const __m128i wk = _mm_add_epi32(w[g & 3][l], k);
        const __m128i abef2 = _mm_sha256rnds2_epu32(cdgh[l], abef[l], wk);  // CDGH after two rounds: the old ABEF
        const __m128i abef4 = _mm_sha256rnds2_epu32(abef[l], abef2, _mm_shuffle_epi32(wk, 0x0E));
        cdgh[l] = abef2;
        abef[l] = abef4;
      }
    }
    for (int l = 0; l < N; ++l) {
      abef[l] = _mm_add_epi32(abef[l], abef0[l]);
      cdgh[l] = _mm_add_epi32(cdgh[l], cdgh0[l]);
    }
  }
  // The digest is a..h, each big-endian: reverse the bytes of (d, c, b, a) and of (h, g, f, e).
  const __m128i reverse = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int l = 0; l < N; ++l) {
    auto* out = reinterpret_cast<__m128i*>(digests[l]);
    _mm_storeu_si128(out, _mm_shuffle_epi8(_mm_unpackhi_epi64(cdgh[l], abef[l]), reverse));
    _mm_storeu_si128(out + 1, _mm_shuffle_epi8(_mm_unpacklo_epi64(cdgh[l], abef[l]), reverse));
  }
}

}  // namespace

bool sha256_hardware_available() {
  static const bool available = query_hardware();
  return available;
}

bool sha256_avx512_available() {
  static const bool available = query_avx512();
  return available;
}

void sha256_scalar(const std::byte* message, size_t num_blocks, std::byte* digest) {
  uint32_t h[8];
  std::memcpy(h, kInitial, sizeof(h));
  for (size_t block = 0; block < num_blocks; ++block) {
    const std::byte* p = message + block * 64;
    uint32_t w[64];
    for (int t = 0; t < 16; ++t)
      w[t] = static_cast<uint32_t>(p[4 * t]) << 24 | static_cast<uint32_t>(p[4 * t + 1]) << 16 |
             static_cast<uint32_t>(p[4 * t + 2]) << 8 | static_cast<uint32_t>(p[4 * t + 3]);
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t t1 =
          hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRoundConstants[t] + w[t];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
  }
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 4; ++k) digest[4 * i + k] = static_cast<std::byte>(h[i] >> (24 - 8 * k));
}

void sha256_pad(std::byte* buf, size_t len) {
  const size_t padded = sha256_padded_size(len);
  buf[len] = std::byte{0x80};
  std::memset(buf + len + 1, 0, padded - len - 1 - 8);
  const uint64_t bits = static_cast<uint64_t>(len) * 8;
  for (int i = 0; i < 8; ++i) buf[padded - 1 - static_cast<size_t>(i)] = static_cast<std::byte>(bits >> (8 * i));
}

void sha256_hardware_lanes(const std::byte* const* messages, int num_lanes, size_t num_blocks,
                           std::byte* const* digests) {
  switch (num_lanes) {
    case 1:
      return compress_lanes<1>(messages, num_blocks, digests);
    case 2:
      return compress_lanes<2>(messages, num_blocks, digests);
    case 3:
      return compress_lanes<3>(messages, num_blocks, digests);
    case 4:
      return compress_lanes<4>(messages, num_blocks, digests);
    default:
      __builtin_trap();  // callers pass 1..kSha256MaxLanes
  }
}

}  // namespace pagedkv
