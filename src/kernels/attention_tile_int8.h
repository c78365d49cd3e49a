// The int8 blocks of the SIMD attention kernel (attention_tile_simd.h includes this after its
// Prefetcher, reduce8 and for_each_row_block; see attention_tile.h for the arithmetic):
//   - qk_block_int8: scores of up to 4 query rows (int16 codes) x Isa::kIntScoreTokens tokens, a key
//     chunk widened to int16 once and multiplied into 4 rows' int32 accumulators (vpdpwssd: two
//     products and the add per 32-bit lane), reduced with hadd trees like the f32 blocks;
//   - softmax_weights_rows: the softmax of up to 4 rows' scores, and their weights p * v_scale
//     as 8-bit codes (unsigned: weights are >= 0) with their steps;
//   - pv_block_int8: a strip of the value accumulators of up to 4 rows, four tokens per
//     instruction: their value codes interleaved per dimension as the four bytes of a 32-bit
//     lane, times the four weight codes broadcast (vpdpbusd: unsigned x signed bytes), summed
//     exactly in int32 over the tile, then added to the f32 accumulators times each row's step.
// Per token and KV head of 128 dimensions with 4 rows (AVX-512): 4 widenings + 16 vpdpwssd for
// the scores, 2 loads + 4 unpacks + 8 vpdpbusd for the values, against 16 conversions + 64 FMAs
// on the f32 path.
#pragma once

namespace pagedkv::attention_detail {
namespace {

// Horizontal sums of eight int32 vectors, as the eight lanes of one vector (reduce8's order).
inline __m256i reduce8_epi32(const __m256i (&v)[8]) {
  const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i t1 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i t3 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i u0 = _mm256_hadd_epi32(t0, t1);
  const __m256i u1 = _mm256_hadd_epi32(t2, t3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// One chunk of dimensions [d, d + kPairDims) of a score block: the keys' codes widened once
// (kHalf: half a chunk; the query row's padding is zero) and multiplied into NR x NT
// accumulators.
template <class Isa, int NR, int NT, bool kHalf>
__attribute__((always_inline)) inline void qk_chunk_int8(typename Isa::IVec (&acc)[NR * NT], const int16_t* q,
                                                         size_t qstride, const int8_t* const* keys, size_t d) {
  typename Isa::IVec k[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) k[t] = kHalf ? Isa::load_k16_half(keys[t] + d) : Isa::load_k16(keys[t] + d);
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const auto qr = Isa::load_q16(q + static_cast<size_t>(r) * qstride + d);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[r * NT + t] = Isa::dpwssd(acc[r * NT + t], qr, k[t]);
  }
}

// s[r * kTileTokens + t] = sum_d q[r][d] * k_t[d] (as f32) for NR rows of codes qstride apart.
// kChunks > 0: the head is exactly kChunks whole chunks, and the chunk loop is unrolled
// completely. The prefetcher steps once per block, outside the arithmetic (Isa::kPrefetchInLoops
// is for the float blocks): with its loop inside the chunk loop, and with the vpdpwssd intrinsic
// (Isa::dpwssd is an asm statement now), GCC copied every accumulator to another register or the
// stack and back in each iteration (~35 moves per 16 vpdpwssd).
template <class Isa, int NR, int NT, int kChunks>
__attribute__((noinline)) void qk_block_int8(const int16_t* q, size_t qstride, size_t dim, const int8_t* const* keys,
                                             float* s, Prefetcher& pf) {
  using IVec = typename Isa::IVec;
  constexpr int kAcc = NR * NT;
  static_assert(kAcc <= 16);
  pf.step();
  IVec acc[kAcc];
#pragma GCC unroll 16
  for (int i = 0; i < kAcc; ++i) acc[i] = Isa::izero();
  if constexpr (kChunks > 0) {
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c)
      qk_chunk_int8<Isa, NR, NT, false>(acc, q, qstride, keys, static_cast<size_t>(c) * Isa::kPairDims);
  } else {
    size_t d = 0;
    for (; d + Isa::kPairDims <= dim; d += Isa::kPairDims) qk_chunk_int8<Isa, NR, NT, false>(acc, q, qstride, keys, d);
    if (d < dim) qk_chunk_int8<Isa, NR, NT, true>(acc, q, qstride, keys, d);
  }
  if constexpr (Isa::kHasReduce16 && NR == 4 && NT == 4) {
    Isa::reduce16(acc, s, kTileTokens);
    return;
  }
  alignas(32) float sums[16];
  __m256i folded[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) folded[i] = i < kAcc ? Isa::fold_i(acc[i]) : _mm256_setzero_si256();
  _mm256_store_ps(sums, _mm256_cvtepi32_ps(reduce8_epi32(*reinterpret_cast<const __m256i(*)[8]>(&folded[0]))));
  if constexpr (kAcc > 8)
    _mm256_store_ps(sums + 8, _mm256_cvtepi32_ps(reduce8_epi32(*reinterpret_cast<const __m256i(*)[8]>(&folded[8]))));
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) s[r * kTileTokens + t] = sums[r * NT + t];
}

template <class Isa, int NR, int kChunks>
void qk_rows_int8(const int16_t* q, size_t qstride, size_t dim, const int8_t* const* keys, int n, float* s,
                  Prefetcher& pf) {
  constexpr int kTokens = NR >= 3 ? Isa::kIntScoreTokens : 8 / NR;
  int j = 0;
  for (; j + kTokens <= n; j += kTokens) qk_block_int8<Isa, NR, kTokens, kChunks>(q, qstride, dim, keys + j, s + j, pf);
  if constexpr (kTokens > 2) {
    if (j + 2 <= n) {
      qk_block_int8<Isa, NR, 2, kChunks>(q, qstride, dim, keys + j, s + j, pf);
      j += 2;
    }
  }
  for (; j < n; ++j) qk_block_int8<Isa, NR, 1, kChunks>(q, qstride, dim, keys + j, s + j, pf);
}

// The common head sizes (4 or 8 whole chunks: 128 dimensions, or 64 / 256 on AVX-512) get the
// completely unrolled blocks; any other size the run-time loop.
template <class Isa, int NR>
void qk_rows_int8_sized(const int16_t* q, size_t qstride, size_t dim, const int8_t* const* keys, int n, float* s,
                        Prefetcher& pf) {
  if (dim == 4 * Isa::kPairDims) return qk_rows_int8<Isa, NR, 4>(q, qstride, dim, keys, n, s, pf);
  if (dim == 8 * Isa::kPairDims) return qk_rows_int8<Isa, NR, 8>(q, qstride, dim, keys, n, s, pf);
  qk_rows_int8<Isa, NR, 0>(q, qstride, dim, keys, n, s, pf);
}

template <class Isa>
void qk_tile_int8(const int16_t* q, int rows, size_t qstride, size_t dim, const int8_t* const* keys, int n,
                  float* scores, Prefetcher& pf) {
  for_each_row_block(rows, [&](auto nr, int r0) {
    qk_rows_int8_sized<Isa, decltype(nr)::value>(q + static_cast<size_t>(r0) * qstride, qstride, dim, keys, n,
                                                 scores + static_cast<size_t>(r0) * kTileTokens, pf);
  });
}

// The scores of NR rows scaled, softmaxed and turned into weight codes: per row, the operations
// of softmax_row (attention_tile_simd.h) and then of the weights' codes, in the same order, but each
// step for all rows before the next, so that the rows' chains of dependent work (horizontal max,
// exp, horizontal sum, and again for the weights) overlap instead of running one after another.
// s: NR rows of kTileTokens raw scores (the integer sums); lo/hi: each row's attended tokens.
template <int NR>
void softmax_weights_rows(const float* s, const int* lo, const int* hi, float softcap, const float* query_scale,
                          const float* query_sum, const float* key_scale, const float* key_offset,
                          const float* value_scale, float* row_max, float* row_sum, float* acc, size_t dim,
                          uint8_t* codes, float* step) {
  static_assert(kTileTokens == 24);
  constexpr int C = kTileTokens / 8;
  __m256 x[NR][C];
  float new_max[NR];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const __m256 qs = _mm256_set1_ps(query_scale[r]), qsum = _mm256_set1_ps(query_sum[r]);
    const bool masked = lo[r] > 0 || hi[r] < kTileTokens;
    const __m256i lo_v = _mm256_set1_epi32(lo[r]), hi_v = _mm256_set1_epi32(hi[r]);
    __m256 tile_max = _mm256_set1_ps(kNegInf);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {  // score = sum * (query scale * key scale) + query sum * key offset
      __m256 v = _mm256_fmadd_ps(qsum, _mm256_load_ps(key_offset + 8 * c),
                                 _mm256_mul_ps(_mm256_loadu_ps(s + r * kTileTokens + 8 * c),
                                               _mm256_mul_ps(qs, _mm256_load_ps(key_scale + 8 * c))));
      if (softcap > 0) v = softcap256(v, softcap);
      if (masked) v = mask_outside(v, c, lo_v, hi_v);
      x[r][c] = v;
      tile_max = _mm256_max_ps(tile_max, v);
    }
    new_max[r] = std::max(row_max[r], hmax(tile_max));
  }
  // The exponentials of all rows' chunks together, two chunks per instruction on AVX-512 (a row
  // with nothing attended so far subtracts 0 and has its probabilities zeroed below).
  __m256 p[NR][C];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const __m256 m = _mm256_set1_ps(new_max[r] == kNegInf ? 0.0f : new_max[r]);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) x[r][c] = _mm256_sub_ps(x[r][c], m);
  }
  exp256_all<NR * C>(&x[0][0], &p[0][0]);
  float tile_sum[NR];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    if (new_max[r] == kNegInf) {  // nothing attended so far: probabilities are all zero
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) p[r][c] = _mm256_setzero_ps();
      tile_sum[r] = 0;
      continue;
    }
    __m256 sum = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sum = _mm256_add_ps(sum, p[r][c]);
    tile_sum[r] = hsum(sum);
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    if (new_max[r] == kNegInf) continue;
    // 0 on the first tile (row_max = -inf); exactly 1, without calling exp, while the max holds.
    const float correction = new_max[r] == row_max[r] ? 1.0f : std::exp(row_max[r] - new_max[r]);
    if (correction != 1.0f) {
      const __m256 cv = _mm256_set1_ps(correction);
      float* a = acc + static_cast<size_t>(r) * dim;
      for (size_t d = 0; d < dim; d += 8) _mm256_storeu_ps(a + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), cv));
    }
    row_max[r] = new_max[r];
    row_sum[r] = row_sum[r] * correction + tile_sum[r];
  }
  // The weights p * value scale (the row sum is of the probabilities alone) as 8-bit codes, code =
  // round(w * 255 / max w), and their step max w / 255; NaN if a weight is NaN (a NaN in the
  // cache reaches the output, as with f32 K/V). attend_tile_head_int8 (scalar) is the twin.
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const __m256 w0 = _mm256_mul_ps(p[r][0], _mm256_load_ps(value_scale));
    const __m256 w1 = _mm256_mul_ps(p[r][1], _mm256_load_ps(value_scale + 8));
    const __m256 w2 = _mm256_mul_ps(p[r][2], _mm256_load_ps(value_scale + 16));
    const float max = hmax(_mm256_max_ps(w0, _mm256_max_ps(w1, w2)));
    const float sum = hsum(_mm256_add_ps(w0, _mm256_add_ps(w1, w2)));
    const __m256 inv = _mm256_set1_ps(max > 0 ? kWeightCodeMax / max : 0.0f);
    uint8_t* out = codes + r * kTileTokens;
    const __m256i c0 = _mm256_cvtps_epi32(_mm256_mul_ps(w0, inv));
    const __m256i c1 = _mm256_cvtps_epi32(_mm256_mul_ps(w1, inv));
    const __m256i c2 = _mm256_cvtps_epi32(_mm256_mul_ps(w2, inv));
    const __m256i c01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(c0, c1), 0xD8);  // tokens 0-15 as int16
    const __m256i c22 = _mm256_permute4x64_epi64(_mm256_packs_epi32(c2, c2), 0xD8);  // 16-23 in the low half
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_packus_epi16(_mm256_castsi256_si128(c01), _mm256_extracti128_si256(c01, 1)));
    const __m128i c2_bytes = _mm_packus_epi16(_mm256_castsi256_si128(c22), _mm256_castsi256_si128(c22));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 16), c2_bytes);
    step[r] = std::isnan(sum) ? std::numeric_limits<float>::quiet_NaN() : max / kWeightCodeMax;
  }
}

// acc[r][d0 + c * kLanes ..) += step[r] * a[r][c]: a value strip's exact int32 sums, scaled by
// each row's weight step, into the f32 accumulators.
template <class Isa, int NR, int kAcc>
__attribute__((always_inline)) inline void add_value_sums(const typename Isa::IVec (&a)[NR][kAcc], const float* step,
                                                          size_t d0, float* acc, size_t dim) {
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    const auto sr = Isa::broadcast(step + r);
#pragma GCC unroll 8
    for (int c = 0; c < kAcc; ++c) {
      float* p = acc + static_cast<size_t>(r) * dim + d0 + static_cast<size_t>(c) * Isa::kLanes;
      Isa::store(p, Isa::fmadd(Isa::to_float(a[r][c]), sr, Isa::load(p)));
    }
  }
}

// acc[r][d0 ..) += step[r] * sum over `quads` token quads j of sum_{i < 4} w[r][4j + i] *
// v_{4j+i}[d], for NR rows and one value group at d0 (kTail: one tail vector).
template <class Isa, int NR, bool kTail>
__attribute__((noinline)) void pv_block_int8(const uint8_t* w, const float* step, const int8_t* const* values,
                                             int quads, size_t d0, float* acc, size_t dim, Prefetcher& pf) {
  using IVec = typename Isa::IVec;
  constexpr int kAcc = kTail ? 1 : Isa::kQuadVecs;
  pf.step();  // once per block, outside the loop (see qk_block_int8)
  IVec a[NR][kAcc];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < kAcc; ++c) a[r][c] = Isa::izero();
  for (int j = 0; j < quads; ++j) {
    IVec v[kAcc];
    if constexpr (kTail) {
      v[0] = Isa::interleave_quad_tail(values + 4 * j, d0);
    } else {
      Isa::interleave_quad(values + 4 * j, d0, v);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const IVec wr = Isa::broadcast_quad(w + r * kTileTokens + 4 * j);
#pragma GCC unroll 8
      for (int c = 0; c < kAcc; ++c) a[r][c] = Isa::dpbusd(a[r][c], wr, v[c]);
    }
  }
  add_value_sums<Isa, NR, kAcc>(a, step, d0, acc, dim);
}

// As pv_block_int8 for an ISA without vpdpbusd (Isa::kPairedValues): each token quad as two
// pairs, their codes widened to int16 and multiplied by the pairs' weight codes (int16, w) with
// vpmaddwd. The int32 sums are the same.
template <class Isa, int NR, bool kTail>
__attribute__((noinline)) void pv_block_int8_pairs(const uint16_t* w, const float* step, const int8_t* const* values,
                                                   int quads, size_t d0, float* acc, size_t dim, Prefetcher& pf) {
  using IVec = typename Isa::IVec;
  constexpr int kAcc = kTail ? 1 : Isa::kQuadVecs;
  pf.step();
  IVec a[NR][kAcc];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < kAcc; ++c) a[r][c] = Isa::izero();
  for (int j = 0; j < quads; ++j) {
    IVec first[kAcc], second[kAcc];  // tokens 4j, 4j + 1 and 4j + 2, 4j + 3
    if constexpr (kTail) {
      Isa::interleave_pairs_tail(values + 4 * j, d0, first, second);
    } else {
      Isa::interleave_pairs(values + 4 * j, d0, first, second);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const IVec w01 = Isa::broadcast_pair(w + r * kTileTokens + 4 * j);
      const IVec w23 = Isa::broadcast_pair(w + r * kTileTokens + 4 * j + 2);
#pragma GCC unroll 8
      for (int c = 0; c < kAcc; ++c) a[r][c] = Isa::madd_add(Isa::madd_add(a[r][c], first[c], w01), second[c], w23);
    }
  }
  add_value_sums<Isa, NR, kAcc>(a, step, d0, acc, dim);
}

template <class Isa, int NR>
void pv_rows_int8(const uint8_t* w, const float* step, const int8_t* const* values, int quads, float* acc, size_t dim,
                  Prefetcher& pf) {
  size_t d = 0;
  if constexpr (Isa::kPairedValues) {  // the weight codes widened once for all strips
    alignas(32) uint16_t w16[NR * kTileTokens];
    for (int i = 0; i < NR * kTileTokens; ++i) w16[i] = w[i];
    for (; d + Isa::kQuadDims <= dim; d += Isa::kQuadDims)
      pv_block_int8_pairs<Isa, NR, false>(w16, step, values, quads, d, acc, dim, pf);
    for (; d < dim; d += Isa::kTailDims) pv_block_int8_pairs<Isa, NR, true>(w16, step, values, quads, d, acc, dim, pf);
    return;
  }
  for (; d + Isa::kQuadDims <= dim; d += Isa::kQuadDims)
    pv_block_int8<Isa, NR, false>(w, step, values, quads, d, acc, dim, pf);
  for (; d < dim; d += Isa::kTailDims) pv_block_int8<Isa, NR, true>(w, step, values, quads, d, acc, dim, pf);
}

// Value strips (prefetcher steps) per row block for a head dimension.
template <class Isa>
constexpr long value_strips_int8(size_t dim) {
  return static_cast<long>(dim / Isa::kQuadDims + dim % Isa::kQuadDims / Isa::kTailDims);
}

template <class Isa>
void pv_tile_int8(const uint8_t* w, const float* step, int rows, const int8_t* const* values, int quads, float* acc,
                  size_t dim, Prefetcher& pf) {
  for_each_row_block(rows, [&](auto nr, int r0) {
    pv_rows_int8<Isa, decltype(nr)::value>(w + static_cast<size_t>(r0) * kTileTokens, step + r0, values, quads,
                                           acc + static_cast<size_t>(r0) * dim, dim, pf);
  });
}

// Undoes Isa::kQuadsPermuted in one accumulator row: in every whole group of 64 dimensions, the
// 4-float block at 16k + 4L holds dimensions 16L + 4k .. +3 (interleave_quad), a 4 x 4 transpose.
template <class Isa>
void unpermute_groups(float* acc, size_t dim) {
  if constexpr (Isa::kQuadsPermuted) {
    static_assert(Isa::kQuadDims == 64);
    for (size_t d = 0; d + 64 <= dim; d += 64) {
      __m128 b[16];
      for (int i = 0; i < 16; ++i) b[i] = _mm_loadu_ps(acc + d + 4 * i);
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 4; ++l) _mm_storeu_ps(acc + d + 16 * l + 4 * k, b[4 * k + l]);
    }
  }
}

}  // namespace
}  // namespace pagedkv::attention_detail
