// The byte-lane operations the AVX-512 VNNI panel kernels share (kquant_kernels_avx512.cpp,
// low_bit_kernels_avx512.cpp, quantized_kernels_avx512.cpp): loading a panel register, unpacking
// levels with shifts, masks and byte shuffles, and the vpdpbusd chains that multiply them with a
// token's Q8_K or Q8_0 values. Include it only from translation units compiled for AVX-512 with VNNI;
// everything has internal linkage (inline: a file may use only some of it).
#pragma once

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "pagedkv/model/format/block_formats.h"  // kIq4NlValues

namespace pagedkv::quant_detail {
namespace {

inline __m512i load(const std::byte* p) { return _mm512_load_si512(p); }
inline __m512i bytes(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }
// Every byte's bits moved left by k (right for negative k); bits crossing into a neighbouring byte
// are masked off by the callers (|k| <= 4 keeps the bits they keep within their own byte).
template <int k>
__m512i shift_bits(__m512i v) {
  if constexpr (k > 0) return _mm512_slli_epi16(v, k);
  else if constexpr (k < 0) return _mm512_srli_epi16(v, -k);
  else return v;
}
// The low (kHigh 0) or high nibble of every byte, as a level 0..15.
template <int kHigh>
__m512i nibbles(__m512i v) {
  return _mm512_and_si512(kHigh ? _mm512_srli_epi16(v, 4) : v, bytes(0x0F));
}
// vpshufb's table from a nibble to its IQ4_NL level + 128 (unsigned, for vpdpbusd), in every
// 16-byte lane: IQ4_NL's and IQ4_XS's levels.
inline __m512i iq4_level_table() {
  static constexpr auto kLevels = [] {
    std::array<uint8_t, 16> u{};
    for (int i = 0; i < 16; ++i) u[static_cast<size_t>(i)] = static_cast<uint8_t>(kIq4NlValues[i] + 128);
    return u;
  }();
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kLevels.data())));
}
// a | (b & c), one vpternlogd.
inline __m512i or_masked(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0xF8); }
// A pshufb pattern: byte j (0..3) of every dword takes byte src[j] of the same dword (-1: zero).
inline __m512i dword_pattern(int s0, int s1, int s2, int s3) {
  const int src[4] = {s0, s1, s2, s3};
  alignas(16) int8_t idx[16];
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 4; ++j) idx[4 * k + j] = static_cast<int8_t>(src[j] < 0 ? -128 : 4 * k + src[j]);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(idx)));
}

// vpdpbusd of w with the 4 bytes at q broadcast, as one instruction with an embedded broadcast
// ({1to16}): GCC 12 emits a separate vpbroadcastd for the intrinsics, two fused-domain micro-ops
// per vpdpbusd instead of one.
inline __m512i dpbusd_broadcast(__m512i acc, __m512i w, const int8_t* q) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(q)));
  return acc;
}

// chain[t] + the products of the N registers w[i] (levels) with token t's 4-byte groups
// xb[t].q[at + 4i..], token by token within each register: the T chains are independent, so that
// consecutive vpdpbusd never wait on one another's latency.
template <int N, int T, class Record>
void dot_chains(__m512i (&chain)[T], const __m512i* w, const Record* xb, int at) {
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) chain[t] = dpbusd_broadcast(chain[t], w[i], xb[t].q + at + 4 * i);
}

}  // namespace
}  // namespace pagedkv::quant_detail
