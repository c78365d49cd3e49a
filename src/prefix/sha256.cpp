#include "pagedkv/prefix/sha256.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

namespace pagedkv {
namespace {

// FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first
// 64 primes.
alignas(16) constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// FIPS 180-4, 5.3.3: the initial hash value H(0) = a..h.
constexpr uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

bool query_hardware() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool ssse3 = (ecx & (1u << 9)) != 0, sse41 = (ecx & (1u << 19)) != 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool sha = (ebx & (1u << 29)) != 0;
  const char* forced = std::getenv("PAGEDKV_SHA256");
  if (forced != nullptr && std::string_view(forced) == "openssl") return false;
  return ssse3 && sse41 && sha;
}

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
    case 1: return compress_lanes<1>(messages, num_blocks, digests);
    case 2: return compress_lanes<2>(messages, num_blocks, digests);
    case 3: return compress_lanes<3>(messages, num_blocks, digests);
    case 4: return compress_lanes<4>(messages, num_blocks, digests);
    default: __builtin_trap();  // callers pass 1..kSha256MaxLanes
  }
}

}  // namespace pagedkv
