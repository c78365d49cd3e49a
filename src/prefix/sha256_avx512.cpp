// SHA-256 of 16 messages at once, one per 32-bit lane of AVX-512 registers (compiled with
// AVX-512 flags; entered only after sha256_avx512_available()). Rotations are single
// instructions (VPRORD) and each three-input logic function one VPTERNLOGD, so a round is about
// 17 vector operations for 16 messages. Its scalar twin is sha256_scalar (sha256.cpp).
// GCC 12's AVX-512 headers flag the undefined vector behind _mm512_ror_epi32 and friends as
// uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "pagedkv/prefix/sha256.h"
#include "sha256_constants.h"

namespace pagedkv {
namespace {

using sha256_detail::kInitial;
using sha256_detail::kRoundConstants;

// VPTERNLOGD truth tables: a ^ b ^ c, a ? b : c (Ch), majority (Maj).
constexpr int kXor3 = 0x96, kChoose = 0xca, kMajority = 0xe8;

inline __m512i big_sigma0(__m512i a) {
  return _mm512_ternarylogic_epi32(_mm512_ror_epi32(a, 2), _mm512_ror_epi32(a, 13), _mm512_ror_epi32(a, 22), kXor3);
}
inline __m512i big_sigma1(__m512i e) {
  return _mm512_ternarylogic_epi32(_mm512_ror_epi32(e, 6), _mm512_ror_epi32(e, 11), _mm512_ror_epi32(e, 25), kXor3);
}
inline __m512i small_sigma0(__m512i w) {
  return _mm512_ternarylogic_epi32(_mm512_ror_epi32(w, 7), _mm512_ror_epi32(w, 18), _mm512_srli_epi32(w, 3), kXor3);
}
inline __m512i small_sigma1(__m512i w) {
  return _mm512_ternarylogic_epi32(_mm512_ror_epi32(w, 17), _mm512_ror_epi32(w, 19), _mm512_srli_epi32(w, 10), kXor3);
}

// rows[l] holds 16 words of message l; afterwards rows[t] holds word t of every message (lane l
// = message l). Three stages: 32-bit and 64-bit interleaves within 128-bit chunks, then the
// chunks themselves.
inline void transpose16(__m512i rows[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  // u[4i + j]: in 128-bit chunk k, rows 4i..4i+3 at column 4k + j.
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Column 4k + j: chunk m comes from chunk k of u[4m + j].
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44),
                  y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    rows[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    rows[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    rows[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    rows[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
}

// 64 rounds over the message words w (overwritten by the schedule), added into h.
inline void compress(__m512i h[8], __m512i w[16]) {
  __m512i a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
#pragma GCC unroll 64
  for (int t = 0; t < 64; ++t) {
    __m512i& wt = w[t & 15];
    if (t >= 16)  // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]; W[t-16] is the slot's old value
      wt = _mm512_add_epi32(_mm512_add_epi32(wt, small_sigma0(w[(t - 15) & 15])),
                            _mm512_add_epi32(w[(t - 7) & 15], small_sigma1(w[(t - 2) & 15])));
    const __m512i kw = _mm512_add_epi32(wt, _mm512_set1_epi32(static_cast<int>(kRoundConstants[t])));
    const __m512i t1 = _mm512_add_epi32(_mm512_add_epi32(hh, kw),
                                        _mm512_add_epi32(big_sigma1(e), _mm512_ternarylogic_epi32(e, f, g, kChoose)));
    const __m512i t2 = _mm512_add_epi32(big_sigma0(a), _mm512_ternarylogic_epi32(a, b, c, kMajority));
    hh = g;
    g = f;
    f = e;
    e = _mm512_add_epi32(d, t1);
    d = c;
    c = b;
    b = a;
    a = _mm512_add_epi32(t1, t2);
  }
  h[0] = _mm512_add_epi32(h[0], a);
  h[1] = _mm512_add_epi32(h[1], b);
  h[2] = _mm512_add_epi32(h[2], c);
  h[3] = _mm512_add_epi32(h[3], d);
  h[4] = _mm512_add_epi32(h[4], e);
  h[5] = _mm512_add_epi32(h[5], f);
  h[6] = _mm512_add_epi32(h[6], g);
  h[7] = _mm512_add_epi32(h[7], hh);
}

inline __m512i to_big_endian_words(__m512i x) {
  return _mm512_shuffle_epi8(
      x, _mm512_broadcast_i32x4(_mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3)));
}

inline void initial_state(__m512i h[8]) {
  for (int i = 0; i < 8; ++i) h[i] = _mm512_set1_epi32(static_cast<int>(kInitial[i]));
}

}  // namespace

void sha256_avx512_x16(const std::byte* const* messages, size_t num_blocks, std::byte* const* digests) {
  __m512i h[8];
  initial_state(h);
  for (size_t block = 0; block < num_blocks; ++block) {
    __m512i w[16];
    for (int l = 0; l < kSha256WideLanes; ++l) w[l] = _mm512_loadu_si512(messages[l] + block * 64);
    transpose16(w);
    for (auto& x : w) x = to_big_endian_words(x);
    compress(h, w);
  }
  // Digest l is word i of lane l for i = 0..7, each big-endian.
  alignas(64) uint32_t words[8][kSha256WideLanes];
  for (int i = 0; i < 8; ++i) _mm512_store_si512(words[i], to_big_endian_words(h[i]));
  for (int l = 0; l < kSha256WideLanes; ++l)
    for (int i = 0; i < 8; ++i) std::memcpy(digests[l] + 4 * i, &words[i][l], 4);
}

void sha256_avx512_chain80_x16(std::byte* const* parents, const std::byte* const* data) {
  // The parents, 16 bytes each, four lanes a register (each read as it was written, 16 bytes:
  // one wide load over several narrow stores would wait for them to retire), then word i of
  // every lane in p[i].
  __m512i p[4];
  const __m512i chunk_major = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  for (int q = 0; q < 4; ++q) {  // chunk i of p[q]: word i of lanes 4q..4q+3
    const auto row = [&](int l) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(parents[l])); };
    __m512i r = _mm512_castsi128_si512(row(4 * q));
    r = _mm512_inserti32x4(r, row(4 * q + 1), 1);
    r = _mm512_inserti32x4(r, row(4 * q + 2), 2);
    r = _mm512_inserti32x4(r, row(4 * q + 3), 3);
    p[q] = _mm512_permutexvar_epi32(chunk_major, r);
  }
  {
    const __m512i x0 = _mm512_shuffle_i32x4(p[0], p[1], 0x44), x1 = _mm512_shuffle_i32x4(p[0], p[1], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(p[2], p[3], 0x44), y1 = _mm512_shuffle_i32x4(p[2], p[3], 0xee);
    p[0] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    p[1] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    p[2] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    p[3] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
  __m512i tokens[16];
  for (int l = 0; l < kSha256WideLanes; ++l) tokens[l] = _mm512_loadu_si512(data[l]);
  transpose16(tokens);
  // Message block 1: the parent, then data words 0..11. Block 2: data words 12..15, the 0x80
  // byte, zeros, and the length (640 bits).
  __m512i w[16];
  for (int i = 0; i < 4; ++i) w[i] = to_big_endian_words(p[i]);
  for (int i = 4; i < 16; ++i) w[i] = to_big_endian_words(tokens[i - 4]);
  __m512i h[8];
  initial_state(h);
  compress(h, w);
  for (int i = 0; i < 4; ++i) w[i] = to_big_endian_words(tokens[12 + i]);
  w[4] = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int i = 5; i < 15; ++i) w[i] = _mm512_setzero_si512();
  w[15] = _mm512_set1_epi32(80 * 8);
  compress(h, w);
  // Words 0..3 of each digest, in byte order, back to each lane's 16 bytes.
  for (int i = 0; i < 4; ++i) h[i] = to_big_endian_words(h[i]);
  const __m512i t0 = _mm512_unpacklo_epi32(h[0], h[1]), t1 = _mm512_unpackhi_epi32(h[0], h[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(h[2], h[3]), t3 = _mm512_unpackhi_epi32(h[2], h[3]);
  // u[j], chunk k: the 16 bytes of lane 4k + j.
  const __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                        _mm512_unpackhi_epi64(t1, t3)};
  for (int j = 0; j < 4; ++j) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(parents[j]), _mm512_extracti32x4_epi32(u[j], 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(parents[4 + j]), _mm512_extracti32x4_epi32(u[j], 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(parents[8 + j]), _mm512_extracti32x4_epi32(u[j], 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(parents[12 + j]), _mm512_extracti32x4_epi32(u[j], 3));
  }
}

}  // namespace pagedkv
