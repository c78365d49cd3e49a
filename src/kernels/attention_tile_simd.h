// The SIMD attention kernel, written once for a vector ISA `Isa` (Avx2Isa in attention_isa_avx2.h,
// Avx512Isa in attention_isa_avx512.h). Each translation unit includes this header under its own
// target flags, and everything here has internal linkage, so no instantiation compiled for one ISA
// can be picked by the linker for the other. Per tile of kTileTokens context tokens:
//   1. scores: blocks of up to 4 query rows x Isa::kScoreTokens tokens (2 rows x 4, 1 x 8) are
//      computed together, so a K row is loaded (and converted from f16/bf16) once per 4 rows,
//      12-16 independent FMA chains hide the FMA latency, and a block's dot products are reduced
//      with hadd trees;
//   2. online softmax on the tile's scores (vector exp; optional soft-cap via a vector tanh);
//   3. values: each accumulator strip of up to 4 rows x Isa::kValueChunks vectors (2 rows x 4, 1 x
//      8) lives in registers while the tile's V rows stream past it.
// The score and value blocks are kept out of line: inlined into the tile loop, GCC spills their
// 12-16 live vector registers (measured with AVX2: 40% slower).
// For a GQA group of G <= 4 query heads (decode) every K and V element is loaded from memory
// once and converted once. With more rows (prefill tiles, G > 4) a 16- or 8-bit tile is converted
// to f32 once into a small buffer and the f32 path reads that. A task may cover several KV heads:
// each tile is then handled head by head. Which tokens make up a tile is TileWalk's choice
// (consecutive, or interleaved streams over scattered blocks); the next tile is prefetched while
// the current one is computed (Prefetcher), and one line of each slot four tiles ahead is touched.
//
// fp8 K/V take the 16-bit formats' path with their own loads (codes to f32); each token's scale
// is folded into its scores after the dot products and into its probabilities after the softmax,
// a multiply per (row, token) instead of one per element. int8 K/V take the integer path
// (attention_tile_int8.h, attend_tile_int8 below), with the scales folded in the same places and
// each int8 key row's offset added to its score times the query row's sum.
//
// Isa provides: Vec, kLanes, kScoreTokens, kValueChunks, kPrefetchInLoops (prefetch a few lines
// per inner-loop iteration rather than a burst per block), zero, load, store, broadcast, fmadd,
// load_f16, load_bf16, load_i8, load_fp8 and fold (a Vec to 8 lanes with the same sum); for the
// int8 path IVec, kPairDims, kIntScoreTokens, kQuadDims, kQuadVecs, kTailDims, kQuadsPermuted,
// kPairedValues, izero, load_k16(_half), load_q16, dpwssd, dpbusd, fold_i, interleave_quad(_tail),
// broadcast_quad, to_float and reduce16, and with kPairedValues interleave_pairs(_tail),
// broadcast_pair and madd_add (see attention_tile_int8.h and the ISA headers). The softmax works on
// 8-lane AVX2 vectors under both ISAs (a tile's 24 scores are three of them); the int8 softmax
// takes their exponentials two at a time on AVX-512 (exp256_all).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention_tile.h"
#include "attention_tile_walk.h"
#include "pagedkv/storage/thread_scratch.h"
#include "vector_exp.h"

namespace pagedkv::attention_detail {
namespace {

using kernels_detail::exp256;
#ifdef __AVX512F__
using kernels_detail::exp512;
#endif

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kRowBlock = 4;  // query rows whose accumulators share registers

template <class Isa>
struct LoadF32 {
  using Storage = float;
  static typename Isa::Vec load(const float* p) { return Isa::load(p); }
};
template <class Isa>
struct LoadF16 {
  using Storage = uint16_t;
  static typename Isa::Vec load(const uint16_t* p) { return Isa::load_f16(p); }
};
template <class Isa>
struct LoadBF16 {
  using Storage = uint16_t;
  static typename Isa::Vec load(const uint16_t* p) { return Isa::load_bf16(p); }
};
// The quantized formats: a load gives the codes (fp8: times 2^-8, see Isa::load_fp8), and each
// (token, head) row's scale, times kScaleFactor, is folded into that token's scores and
// probabilities (ScaledRows below), so the inner loops stay those of the 16-bit formats.
// int8 takes the integer path (attention_tile_int8.h); load() serves nothing else.
template <class Isa>
struct LoadInt8 {
  using Storage = int8_t;
  static constexpr float kScaleFactor = 1.0f;
  static constexpr bool kIntegerDot = true;
  static typename Isa::Vec load(const int8_t* p) { return Isa::load_i8(p); }
};
template <class Isa>
struct LoadFp8 {
  using Storage = uint8_t;
  static constexpr float kScaleFactor = 256.0f;
  static typename Isa::Vec load(const uint8_t* p) { return Isa::load_fp8(p); }
};

template <class L>
concept ScaledRows = requires {
  L::kScaleFactor;
};
template <class L>
concept IntegerDot = requires {
  L::kIntegerDot;
};

// Horizontal sums of eight vectors, as the eight lanes of one vector.
inline __m256 reduce8(const __m256 (&v)[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // lanes: v0..v3 low halves, then v0..v3 high halves
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// out[i] = exp256(in[i]) for N 8-lane vectors; built with AVX-512, two of them per exp512.
template <int N>
inline void exp256_all(const __m256* in, __m256* out) {
#ifdef __AVX512F__
#pragma GCC unroll 8
  for (int i = 0; i + 1 < N; i += 2) {
    const __m512 e = exp512(_mm512_insertf32x8(_mm512_castps256_ps512(in[i]), in[i + 1], 1));
    out[i] = _mm512_castps512_ps256(e);
    out[i + 1] = _mm512_extractf32x8_ps(e, 1);
  }
  if constexpr (N % 2 == 1) out[N - 1] = exp256(in[N - 1]);
#else
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) out[i] = exp256(in[i]);
#endif
}

// cap * tanh(x / cap). tanh|y| = (1 - e) / (1 + e) with e = exp(-2|y|); below |y| = 1/16, where
// 1 - e would cancel, the odd Taylor series to y^5 (relative error under 4e-9).
inline __m256 softcap256(__m256 x, float cap) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 y = _mm256_mul_ps(x, _mm256_set1_ps(1.0f / cap));
  const __m256 ay = _mm256_andnot_ps(sign_mask, y);
  const __m256 e = exp256(_mm256_mul_ps(ay, _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t_large = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 y2 = _mm256_mul_ps(ay, ay);
  __m256 poly = _mm256_fmadd_ps(y2, _mm256_set1_ps(2.0f / 15.0f), _mm256_set1_ps(-1.0f / 3.0f));
  poly = _mm256_fmadd_ps(poly, y2, one);
  const __m256 t_small = _mm256_mul_ps(poly, ay);
  const __m256 small = _mm256_cmp_ps(ay, _mm256_set1_ps(0.0625f), _CMP_LT_OQ);
  const __m256 t = _mm256_blendv_ps(t_large, t_small, small);
  return _mm256_mul_ps(_mm256_or_ps(t, _mm256_and_ps(y, sign_mask)), _mm256_set1_ps(cap));
}

// Score chunk c of a tile (tokens 8c .. 8c + 7) with the lanes outside [lo, hi) set to -inf
// (lo_v, hi_v: lo and hi broadcast).
inline __m256 mask_outside(__m256 x, int c, __m256i lo_v, __m256i hi_v) {
  const __m256i index = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * c));
  const __m256i outside = _mm256_or_si256(_mm256_cmpgt_epi32(lo_v, index),
                                          _mm256_cmpgt_epi32(_mm256_add_epi32(index, _mm256_set1_epi32(1)), hi_v));
  return _mm256_blendv_ps(x, _mm256_set1_ps(kNegInf), _mm256_castsi256_ps(outside));
}

// Prefetches the next tile into L2 while the current one is computed, a few lines per call of
// step(), spread over the tile's compute: a burst of hundreds of prefetches would queue behind
// the core's few line-fill buffers and stall the arithmetic (measured: f16 decode from DRAM went
// from 6.5 to 8 GB/s per core). One KV head's rows are strided in the arena (all heads of a
// token are adjacent), which the hardware prefetcher follows poorly. L2, not L1: with all heads
// in one task a tile is 64-256 KiB. Every line is prefetched: every other line (leaving the
// rest to the adjacent-line prefetcher) was measured slower, 76% -> 64% of bandwidth for fp32.
class Prefetcher {
 public:
  // The `bytes` bytes at `offset` in each of the n K and n V slots, over about `calls` steps.
  template <class T>
  void start(const T* const* key_slots, const T* const* value_slots, int n, size_t offset, size_t bytes, long calls) {
    n_ = n;
    for (int j = 0; j < n; ++j) {
      slots_[2 * j] = reinterpret_cast<const char*>(key_slots[j]) + offset;
      slots_[2 * j + 1] = reinterpret_cast<const char*>(value_slots[j]) + offset;
    }
    bytes_ = bytes;
    next_slot_ = 0;
    next_byte_ = 0;
    const long lines = static_cast<long>(2 * n) * static_cast<long>((bytes + 63) / 64);
    per_step_ = static_cast<int>(std::max(1L, (lines + calls - 1) / std::max(1L, calls)));
  }
  void step() { issue(per_step_); }
  void finish() { issue(std::numeric_limits<int>::max()); }

 private:
  // Works on local copies of the position: the members live in memory (the object is passed by
  // reference to out-of-line blocks), and a store and reload per line cost more than the prefetch.
  void issue(int lines) {
    int slot = next_slot_;
    size_t byte = next_byte_;
    while (lines > 0 && slot < 2 * n_) {
      const char* base = slots_[slot] + byte;
      const int count = static_cast<int>(std::min<size_t>(static_cast<size_t>(lines), (bytes_ - byte + 63) / 64));
      for (int i = 0; i < count; ++i) _mm_prefetch(base + 64 * i, _MM_HINT_T1);
      lines -= count;
      byte += 64 * static_cast<size_t>(count);
      if (byte >= bytes_) {
        byte = 0;
        ++slot;
      }
    }
    next_slot_ = slot;
    next_byte_ = byte;
  }
  const char* slots_[2 * kTileTokens] = {};
  int n_ = 0, next_slot_ = 0, per_step_ = 0;
  size_t bytes_ = 0, next_byte_ = 0;
};

// Scores of NR query rows against NT tokens: s[r * kTileTokens + t] = q_r . k_t.
template <class Isa, class L, int NR, int NT>
__attribute__((noinline)) void qk_block(const float* q, size_t dim, const typename L::Storage* const* keys, float* s,
                                        Prefetcher& pf) {
  using Vec = typename Isa::Vec;
  constexpr int kAcc = NR * NT;
  static_assert(kAcc <= 16);
  Vec acc[kAcc];
#pragma GCC unroll 16
  for (int i = 0; i < kAcc; ++i) acc[i] = Isa::zero();
  for (size_t d = 0; d < dim; d += Isa::kLanes) {
    Vec k[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) k[t] = L::load(keys[t] + d);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const Vec qr = Isa::load(q + static_cast<size_t>(r) * dim + d);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[r * NT + t] = Isa::fmadd(qr, k[t], acc[r * NT + t]);
    }
    if constexpr (Isa::kPrefetchInLoops) pf.step();
  }
  if constexpr (!Isa::kPrefetchInLoops) pf.step();
  alignas(32) float sums[16];
  __m256 folded[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) folded[i] = i < kAcc ? Isa::fold(acc[i]) : _mm256_setzero_ps();
  _mm256_store_ps(sums, reduce8(*reinterpret_cast<const __m256(*)[8]>(&folded[0])));
  if constexpr (kAcc > 8) _mm256_store_ps(sums + 8, reduce8(*reinterpret_cast<const __m256(*)[8]>(&folded[8])));
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) s[r * kTileTokens + t] = sums[r * NT + t];
}

template <class Isa, class L, int NR>
void qk_rows(const float* q, size_t dim, const typename L::Storage* const* keys, int n, float* s, Prefetcher& pf) {
  constexpr int kTokens = NR >= 3 ? Isa::kScoreTokens : 8 / NR;  // NR * kTokens independent FMA chains
  int j = 0;
  for (; j + kTokens <= n; j += kTokens) {
    qk_block<Isa, L, NR, kTokens>(q, dim, keys + j, s + j, pf);
  }
  if constexpr (kTokens > 2) {
    if (j + 2 <= n) {
      qk_block<Isa, L, NR, 2>(q, dim, keys + j, s + j, pf);
      j += 2;
    }
  }
  for (; j < n; ++j) qk_block<Isa, L, NR, 1>(q, dim, keys + j, s + j, pf);
}

// Calls f(std::integral_constant<int, NR>{}, r0) for each block of NR <= kRowBlock rows starting
// at row r0: the row count becomes a template argument of the register-blocked code.
template <class F>
void for_each_row_block(int rows, F&& f) {
  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    switch (std::min(kRowBlock, rows - r0)) {
      case 4:
        f(std::integral_constant<int, 4>{}, r0);
        break;
      case 3:
        f(std::integral_constant<int, 3>{}, r0);
        break;
      case 2:
        f(std::integral_constant<int, 2>{}, r0);
        break;
      default:
        f(std::integral_constant<int, 1>{}, r0);
        break;
    }
  }
}

template <class Isa, class L>
void qk_tile(const float* q, int rows, size_t dim, const typename L::Storage* const* keys, int n, float* scores,
             Prefetcher& pf) {
  for_each_row_block(rows, [&](auto nr, int r0) {
    qk_rows<Isa, L, decltype(nr)::value>(q + static_cast<size_t>(r0) * dim, dim, keys, n,
                                         scores + static_cast<size_t>(r0) * kTileTokens, pf);
  });
}

// acc[r][d0 .. d0 + NC lanes) += sum_j p[r][j] * v_j[d0 ..] for NR rows.
template <class Isa, class L, int NR, int NC>
__attribute__((noinline)) void pv_block(const float* p, const typename L::Storage* const* values, int n, size_t d0,
                                        float* acc, size_t dim, Prefetcher& pf) {
  using Vec = typename Isa::Vec;
  constexpr size_t W = Isa::kLanes;
  Vec a[NR][NC];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) a[r][c] = Isa::load(acc + static_cast<size_t>(r) * dim + d0 + W * c);
  for (int j = 0; j < n; ++j) {
    Vec v[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) v[c] = L::load(values[j] + d0 + W * c);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const Vec pr = Isa::broadcast(p + r * kTileTokens + j);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) a[r][c] = Isa::fmadd(pr, v[c], a[r][c]);
    }
    if constexpr (Isa::kPrefetchInLoops) pf.step();
  }
  if constexpr (!Isa::kPrefetchInLoops) pf.step();
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) Isa::store(acc + static_cast<size_t>(r) * dim + d0 + W * c, a[r][c]);
}

// One strip of `chunks` vectors (1 <= chunks <= Isa::kValueChunks) at d0.
template <class Isa, class L, int NR, int NC = Isa::kValueChunks>
void pv_strip(int chunks, const float* p, const typename L::Storage* const* values, int n, size_t d0, float* acc,
              size_t dim, Prefetcher& pf) {
  if constexpr (NC > 1) {
    if (chunks < NC) return pv_strip<Isa, L, NR, NC - 1>(chunks, p, values, n, d0, acc, dim, pf);
  }
  pv_block<Isa, L, NR, NC>(p, values, n, d0, acc, dim, pf);
}

template <class Isa, class L, int NR>
void pv_rows(const float* p, const typename L::Storage* const* values, int n, float* acc, size_t dim, Prefetcher& pf) {
  // Rows 3-4: strips of kValueChunks vectors; the last two strips split what is left evenly, so
  // that no latency-bound 1-vector strip remains unless the head is a single vector wide. Rows
  // 1-2: strips of 8 / NR vectors.
  constexpr int kStrip = NR >= 3 ? Isa::kValueChunks : 8 / NR;
  size_t d0 = 0;
  for (int left = static_cast<int>(dim / Isa::kLanes); left > 0;) {
    int chunks = left;
    if (NR < 3) chunks = std::min(left, kStrip);
    else if (left >= 2 * kStrip) chunks = kStrip;
    else if (left > kStrip) chunks = (left + 1) / 2;
    if constexpr (NR >= 3) pv_strip<Isa, L, NR>(chunks, p, values, n, d0, acc, dim, pf);
    else pv_strip<Isa, L, NR, kStrip>(chunks, p, values, n, d0, acc, dim, pf);
    d0 += static_cast<size_t>(chunks) * Isa::kLanes;
    left -= chunks;
  }
}

template <class Isa, class L>
void pv_tile(const float* probs, int rows, const typename L::Storage* const* values, int n, float* acc, size_t dim,
             Prefetcher& pf) {
  for_each_row_block(rows, [&](auto nr, int r0) {
    pv_rows<Isa, L, decltype(nr)::value>(probs + static_cast<size_t>(r0) * kTileTokens, values, n,
                                         acc + static_cast<size_t>(r0) * dim, dim, pf);
  });
}

}  // namespace
}  // namespace pagedkv::attention_detail

#include "attention_tile_int8.h"

namespace pagedkv::attention_detail {
namespace {

// Turns one row's tile scores into probabilities (in place) and updates its running max, sum
// and accumulator. Entries outside [lo, hi) are masked out.
inline void softmax_row(float* s, int lo, int hi, float softcap, float& row_max, float& row_sum, float* acc,
                        size_t dim) {
  static_assert(kTileTokens % 8 == 0);
  __m256 v[kTileTokens / 8];
  const __m256i lo_v = _mm256_set1_epi32(lo), hi_v = _mm256_set1_epi32(hi);
  const bool masked = lo > 0 || hi < kTileTokens;
  __m256 tile_max = _mm256_set1_ps(kNegInf);
#pragma GCC unroll 4
  for (int c = 0; c < kTileTokens / 8; ++c) {
    __m256 x = _mm256_loadu_ps(s + 8 * c);
    if (softcap > 0) x = softcap256(x, softcap);
    if (masked) x = mask_outside(x, c, lo_v, hi_v);
    v[c] = x;
    tile_max = _mm256_max_ps(tile_max, x);
  }
  const float new_max = std::max(row_max, hmax(tile_max));
  if (new_max == kNegInf) {  // nothing attended so far: probabilities are all zero
    for (int j = 0; j < kTileTokens; ++j) s[j] = 0.0f;
    return;
  }
  const __m256 m = _mm256_set1_ps(new_max);
  __m256 sum = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int c = 0; c < kTileTokens / 8; ++c) {
    const __m256 p = exp256(_mm256_sub_ps(v[c], m));
    _mm256_storeu_ps(s + 8 * c, p);
    sum = _mm256_add_ps(sum, p);
  }
  // 0 on the first tile (row_max = -inf); exactly 1, without calling exp, while the max holds.
  const float correction = new_max == row_max ? 1.0f : std::exp(row_max - new_max);
  if (correction != 1.0f) {
    const __m256 cv = _mm256_set1_ps(correction);
    for (size_t d = 0; d < dim; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), cv));
  }
  row_max = new_max;
  row_sum = row_sum * correction + hsum(sum);
}

// One KV head's scales in a tile (32-byte aligned for the int8 softmax's loads).
struct alignas(32) TileScales {
  float key_scale[kTileTokens], key_offset[kTileTokens], value_scale[kTileTokens];
};

// The scales of one KV head in a tile's n slots, scale_offset bytes into each, into `out`: times
// L::kScaleFactor, and zero past n: int8 keys hold an f16 scale and an f16 offset
// (storage/kv_quantize.h), fp8 keys an f32 scale, values an f32 scale. (For one head, converting 8
// at a time measured no faster: the time here is the first touch of each slot's scale line. int8
// tiles read all their heads' scales at once instead: load_tile_scales_int8.)
template <class L, class T>
void load_tile_scales(const T* const* key_slots, const T* const* value_slots, int n, size_t scale_offset,
                      TileScales& out) {
  for (int j = 0; j < n; ++j) {
    const char* key_scales = reinterpret_cast<const char*>(key_slots[j]) + scale_offset;
    if constexpr (IntegerDot<L>) {
      uint16_t scale_and_offset[2];
      std::memcpy(scale_and_offset, key_scales, sizeof scale_and_offset);
      out.key_scale[j] = _cvtsh_ss(scale_and_offset[0]);
      out.key_offset[j] = _cvtsh_ss(scale_and_offset[1]);
    } else {
      std::memcpy(&out.key_scale[j], key_scales, sizeof(float));
    }
    std::memcpy(&out.value_scale[j], reinterpret_cast<const char*>(value_slots[j]) + scale_offset, sizeof(float));
    out.key_scale[j] *= L::kScaleFactor;
    out.value_scale[j] *= L::kScaleFactor;
  }
  for (int j = n; j < kTileTokens; ++j) out.key_scale[j] = out.key_offset[j] = out.value_scale[j] = 0.0f;
}

// Transposes eight rows of eight 32-bit elements (r[i] lane j -> r[j] lane i).
inline void transpose8x8(__m256i (&r)[8]) {
  __m256i a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    a[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    b[i] = _mm256_unpacklo_epi64(a[i], a[i + 2]);
    b[i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 2]);
    b[i + 2] = _mm256_unpacklo_epi64(a[i + 1], a[i + 3]);
    b[i + 3] = _mm256_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
  }
}

// load_tile_scales for all `heads` heads of an int8 tile at once (the same values: f16 to f32 is
// exact, and int8's scale factor is 1). A slot holds its heads' scales side by side, so eight
// heads of eight tokens are eight 32-byte loads and a transpose, where the scalar loop took a load,
// a conversion and a store per value, one head at a time: 8 % of a 4K-token decode call on AVX-512.
// scale_offset: the first head's scale in a slot.
template <class Isa>
void load_tile_scales_int8(const int8_t* const* key_slots, const int8_t* const* value_slots, int n, size_t scale_offset,
                           int heads, TileScales* out) {
  static_assert(kTileTokens % 8 == 0 && LoadInt8<Isa>::kScaleFactor == 1.0f);
  int h0 = 0;
  for (; h0 + 8 <= heads; h0 += 8) {
    const size_t offset = scale_offset + static_cast<size_t>(h0) * kKVScaleBytes;
    for (int j0 = 0; j0 < kTileTokens; j0 += 8) {
      __m256i key[8], value[8];  // row i: the eight heads of token j0 + i (zero past n)
      for (int i = 0; i < 8; ++i) {
        key[i] = value[i] = _mm256_setzero_si256();
        if (j0 + i >= n) continue;
        key[i] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(reinterpret_cast<const char*>(key_slots[j0 + i]) + offset));
        value[i] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(reinterpret_cast<const char*>(value_slots[j0 + i]) + offset));
      }
      transpose8x8(key);  // row h: the eight tokens of head h0 + h (f16 scale low, f16 offset high)
      transpose8x8(value);
      for (int h = 0; h < 8; ++h) {
        TileScales& t = out[h0 + h];
        const __m256i scale_bits = _mm256_and_si256(key[h], _mm256_set1_epi32(0xFFFF));
        const __m256i offset_bits = _mm256_srli_epi32(key[h], 16);
        // As 16-bit: scales 0-3, offsets 0-3, scales 4-7, offsets 4-7; then scales 0-7, offsets 0-7.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(scale_bits, offset_bits), 0xD8);
        _mm256_store_ps(t.key_scale + j0, _mm256_cvtph_ps(_mm256_castsi256_si128(packed)));
        _mm256_store_ps(t.key_offset + j0, _mm256_cvtph_ps(_mm256_extracti128_si256(packed, 1)));
        _mm256_store_ps(t.value_scale + j0, _mm256_castsi256_ps(value[h]));
      }
    }
  }
  for (; h0 < heads; ++h0)  // the last heads, fewer than eight: one at a time
    load_tile_scales<LoadInt8<Isa>>(key_slots, value_slots, n, scale_offset + static_cast<size_t>(h0) * kKVScaleBytes,
                                    out[h0]);
}

// One tile of one KV head (h of the task) on the integer path: scores, softmax, weights to 8-bit
// codes, values.
template <class Isa>
void attend_tile_int8(const RowGroupTask& task, int h, int tile, int n, const int8_t* const* keys,
                      const int8_t* const* values, const TileScales& scale, float* scores, uint8_t* weight_codes,
                      float* weight_step, size_t qstride, Prefetcher& pf) {
  const size_t dim = static_cast<size_t>(task.kv->head_dim);
  const int rows = task.num_rows;
  const size_t head_rows = static_cast<size_t>(rows);
  const int16_t* codes = task.query_codes + static_cast<size_t>(h) * head_rows * qstride;
  const float* query_scale = task.query_scale + static_cast<size_t>(h) * head_rows;
  const float* query_sum = task.query_sum + static_cast<size_t>(h) * head_rows;
  float* acc = task.acc + static_cast<size_t>(h) * head_rows * dim;
  float* row_max = task.row_max + static_cast<size_t>(h) * head_rows;
  float* row_sum = task.row_sum + static_cast<size_t>(h) * head_rows;
  qk_tile_int8<Isa>(codes, rows, qstride, dim, keys, n, scores, pf);
  for_each_row_block(rows, [&](auto nr, int r0) {
    constexpr int NR = decltype(nr)::value;
    int lo[NR], hi[NR];
    for (int i = 0; i < NR; ++i) {
      lo[i] = task.rows_share_range ? 0 : std::clamp(task.row_begin[r0 + i] - tile, 0, n);
      hi[i] = task.rows_share_range ? n : std::clamp(task.row_end[r0 + i] - tile, 0, n);
    }
    const auto r = static_cast<size_t>(r0);
    softmax_weights_rows<NR>(scores + r * kTileTokens, lo, hi, task.logit_softcap, query_scale + r, query_sum + r,
                             scale.key_scale, scale.key_offset, scale.value_scale, row_max + r, row_sum + r,
                             acc + r * dim, dim, weight_codes + r * kTileTokens, weight_step + r);
  });
  pv_tile_int8<Isa>(weight_codes, weight_step, rows, values, (n + 3) / 4, acc, dim, pf);
}

template <class Isa, class L>
void attend(const RowGroupTask& task) {
  using T = typename L::Storage;
  using F32 = LoadF32<Isa>;
  const size_t dim = static_cast<size_t>(task.kv->head_dim);
  const int rows = task.num_rows;
  const int heads = task.num_kv_heads;
  const size_t head_rows = static_cast<size_t>(rows);
  const size_t head_block = head_rows * dim;
  // 16- or 8-bit K/V read by more than one block of rows: convert each tile once (int8: each block
  // of rows widens the codes it reads, cheap next to the integer dot products).
  constexpr bool kInteger = IntegerDot<L>;
  constexpr bool kConverted = !std::is_same_v<T, float> && !kInteger;
  const bool convert_tiles = kConverted && rows > kRowBlock;
  const size_t qstride = padded_query_dim(dim);

  // Buffers from thread_scratch, not containers of this file's own (thread_scratch.h says why).
  float* scores = thread_scratch_floats(ScratchBuffer::kTileScores, head_rows * kTileTokens);
  uint8_t* weight_codes = nullptr;
  float* weight_step = nullptr;
  TileScales* int8_scales = nullptr;  // per head: the current tile's
  if constexpr (kInteger) {
    weight_codes = static_cast<uint8_t*>(thread_scratch(ScratchBuffer::kTileWeightCodes, head_rows * kTileTokens));
    weight_step = thread_scratch_floats(ScratchBuffer::kTileWeightSteps, head_rows);
    int8_scales = static_cast<TileScales*>(
        thread_scratch(ScratchBuffer::kTileScales, static_cast<size_t>(heads) * sizeof(TileScales)));
  }
  float* key_tile = nullptr;
  float* value_tile = nullptr;
  if (convert_tiles) {
    key_tile = thread_scratch_floats(ScratchBuffer::kTileKeys, kTileTokens * dim);
    value_tile = thread_scratch_floats(ScratchBuffer::kTileValues, kTileTokens * dim);
  }
  std::fill(task.acc, task.acc + static_cast<size_t>(heads) * head_block, 0.0f);
  std::fill(task.row_max, task.row_max + static_cast<size_t>(heads) * head_rows, kNegInf);
  std::fill(task.row_sum, task.row_sum + static_cast<size_t>(heads) * head_rows, 0.0f);

  const T* key_slots[2][kTileTokens];
  const T* value_slots[2][kTileTokens];
  const T* keys[kTileTokens];
  const T* values[kTileTokens];
  const float* converted_keys[kTileTokens];
  const float* converted_values[kTileTokens];
  for (int j = 0; j < kTileTokens && convert_tiles; ++j) {
    converted_keys[j] = key_tile + static_cast<size_t>(j) * dim;
    converted_values[j] = value_tile + static_cast<size_t>(j) * dim;
  }
  // The bytes of a slot this task reads: its heads' rows, adjacent in the slot, and with all heads
  // of a quantized slot, the scales after them (a task of fewer heads leaves their scale line to
  // the hardware prefetcher rather than prefetch the other heads' rows in between).
  const size_t read_offset = static_cast<size_t>(task.first_kv_head) * dim * sizeof(T);
  const size_t read_bytes = heads == task.kv->num_kv_heads ? task.kv->slot_bytes() - read_offset
                                                           : static_cast<size_t>(heads) * dim * sizeof(T);
  TileScales scales{};  // fp8: the current head's (int8 keeps every head's, in int8_scales)
  // Prefetcher steps per head and tile (see Isa::kPrefetchInLoops): one per score block and value
  // strip, or one per vector of a score block's dot products and per token of a value strip.
  const long vectors = static_cast<long>(dim / Isa::kLanes);
  constexpr int kScoreTokens = kInteger ? Isa::kIntScoreTokens : Isa::kScoreTokens;
  const long score_blocks = (kTileTokens + kScoreTokens - 1) / kScoreTokens;
  const long value_strips = (vectors + Isa::kValueChunks - 1) / Isa::kValueChunks;
  const long int_strips = value_strips_int8<Isa>(dim);  // int8: value strips per row block
  const long steps_per_head =
      ((rows + kRowBlock - 1) / kRowBlock) *
      (kInteger ? score_blocks + int_strips  // the int8 blocks step once each (attention_tile_int8.h)
                : (Isa::kPrefetchInLoops ? vectors * score_blocks + kTileTokens * value_strips
                                         : score_blocks + value_strips));

  Prefetcher prefetcher;
  int buffer = 0;
  // Streams and touching ahead are for K/V that come from DRAM: a task whose K/V fit in the L2
  // (a small model's, or a short range) is read in order and touches nothing ahead.
  const bool streaming = streams_from_memory(task, read_bytes);
  TileWalk walk(task, streaming, read_bytes);
  // A second walk, kTouchDistance tiles ahead, touches one line of each slot: the first access to
  // a scattered block (a TLB miss, under nested paging a long one, and a cold DRAM page) then
  // overlaps the tiles in between instead of stalling the prefetch stream. Measured in-process
  // A/B on the AMD EPYC VM: paged decode 2-8% faster at 2 tiles, about 1.5% more at 4 or 8.
  constexpr int kTouchDistance = 4;
  TileWalk ahead = walk;
  const T* ahead_keys[kTileTokens];
  const T* ahead_values[kTileTokens];
  if (streaming)
    for (int k = 0; k < kTouchDistance && k < walk.num_tiles(); ++k) (void)ahead.next(ahead_keys, ahead_values);
  int next_n = walk.next(key_slots[0], value_slots[0]);
  for (int k = 0; k < walk.num_tiles(); ++k) {
    const int tile = task.token_begin + k * kTileTokens;  // its first position, when tiles are consecutive
    const int n = next_n;
    next_n = k + 1 < walk.num_tiles() ? walk.next(key_slots[buffer ^ 1], value_slots[buffer ^ 1]) : 0;
    if (streaming && k + kTouchDistance < walk.num_tiles()) {
      const int m = ahead.next(ahead_keys, ahead_values);
      for (int j = 0; j < m; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead_keys[j]) + read_offset, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(ahead_values[j]) + read_offset, _MM_HINT_T1);
      }
    }
    if (next_n > 0) {
      prefetcher.start(key_slots[buffer ^ 1], value_slots[buffer ^ 1], next_n, read_offset, read_bytes,
                       heads * steps_per_head);
    }

    if constexpr (kInteger)
      load_tile_scales_int8<Isa>(key_slots[buffer], value_slots[buffer], n,
                                 task.kv->rows_bytes() + static_cast<size_t>(task.first_kv_head) * kKVScaleBytes, heads,
                                 int8_scales);
    for (int h = 0; h < heads; ++h) {
      const size_t head_offset = static_cast<size_t>(task.first_kv_head + h) * dim;
      for (int j = 0; j < n; ++j) {
        keys[j] = key_slots[buffer][j] + head_offset;
        values[j] = value_slots[buffer][j] + head_offset;
      }
      // The integer value blocks take tokens in fours: a tile's last quad is filled up with its last
      // token under zero weights.
      if (kInteger)
        for (int j = n; j % 4 != 0; ++j) values[j] = values[n - 1];
      // int8 from DRAM: the next head's key rows (adjacent in each slot) into the L1 while this
      // head is computed. The Prefetcher brings lines only to the L2, and the score blocks, which
      // read four tokens' rows at a time, then wait on it: 1-5 % faster at >= 4K tokens, paged
      // within 3.5 % of contiguous on AVX2. Not for K/V that fit
      // in the L2 (3 % slower there), nor for fp16 (0-15 % slower).
      if constexpr (kInteger) {
        if (streaming && h + 1 < heads)
          for (int j = 0; j < n; ++j)
            for (size_t b = 0; b < dim; b += 64)
              _mm_prefetch(reinterpret_cast<const char*>(keys[j] + dim + b), _MM_HINT_T0);
      }
      if constexpr (ScaledRows<L> && !kInteger) {
        const size_t scale_offset = task.kv->rows_bytes() + static_cast<size_t>(task.first_kv_head + h) * kKVScaleBytes;
        load_tile_scales<L>(key_slots[buffer], value_slots[buffer], n, scale_offset, scales);
      }
      if constexpr (kInteger) {  // (task.query is unset: the integer path reads the query codes)
        attend_tile_int8<Isa>(task, h, tile, n, keys, values, int8_scales[static_cast<size_t>(h)], scores, weight_codes,
                              weight_step, qstride, prefetcher);
        continue;
      }
      const float* query = task.query + static_cast<size_t>(h) * head_block;
      float* acc = task.acc + static_cast<size_t>(h) * head_block;
      float* row_max = task.row_max + static_cast<size_t>(h) * head_rows;
      float* row_sum = task.row_sum + static_cast<size_t>(h) * head_rows;
      if (convert_tiles) {
        for (int j = 0; j < n; ++j)
          for (size_t d = 0; d < dim; d += Isa::kLanes) {
            Isa::store(key_tile + static_cast<size_t>(j) * dim + d, L::load(keys[j] + d));
            Isa::store(value_tile + static_cast<size_t>(j) * dim + d, L::load(values[j] + d));
          }
        qk_tile<Isa, F32>(query, rows, dim, converted_keys, n, scores, prefetcher);
      } else {
        qk_tile<Isa, L>(query, rows, dim, keys, n, scores, prefetcher);
      }

      for (int r = 0; r < rows; ++r) {
        float* s = scores + static_cast<size_t>(r) * kTileTokens;
        if constexpr (ScaledRows<L>)
          for (int j = 0; j < n; ++j) s[j] *= scales.key_scale[j];
        const int lo = task.rows_share_range ? 0 : std::clamp(task.row_begin[r] - tile, 0, n);
        const int hi = task.rows_share_range ? n : std::clamp(task.row_end[r] - tile, 0, n);
        softmax_row(s, lo, hi, task.logit_softcap, row_max[r], row_sum[r], acc + static_cast<size_t>(r) * dim, dim);
        // The row sum is of the probabilities themselves; the value scales weigh only the rows.
        if constexpr (ScaledRows<L>)
          for (int j = 0; j < n; ++j) s[j] *= scales.value_scale[j];
      }

      if (convert_tiles) pv_tile<Isa, F32>(scores, rows, converted_values, n, acc, dim, prefetcher);
      else pv_tile<Isa, L>(scores, rows, values, n, acc, dim, prefetcher);
    }
    prefetcher.finish();
    buffer ^= 1;
  }
  if constexpr (kInteger)
    for (size_t row = 0; row < static_cast<size_t>(heads) * head_rows; ++row)
      unpermute_groups<Isa>(task.acc + row * dim, dim);
}

// The entry point for one ISA: dispatches on the storage type.
template <class Isa>
void attend_rows(const RowGroupTask& task) {
  switch (task.kv->dtype) {
    case DType::kF32:
      return attend<Isa, LoadF32<Isa>>(task);
    case DType::kF16:
      return attend<Isa, LoadF16<Isa>>(task);
    case DType::kBF16:
      return attend<Isa, LoadBF16<Isa>>(task);
    case DType::kInt8:
      return attend<Isa, LoadInt8<Isa>>(task);
    case DType::kFP8:
      return attend<Isa, LoadFp8<Isa>>(task);
    default:
      return;  // the driver accepts only storage types
  }
}

// The entry point of the VNNI builds, which serve int8 K/V only.
template <class Isa>
void attend_rows_int8(const RowGroupTask& task) {
  attend<Isa, LoadInt8<Isa>>(task);
}

}  // namespace
}  // namespace pagedkv::attention_detail
