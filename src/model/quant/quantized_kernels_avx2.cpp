// The AVX2+FMA+F16C build of QuantizedMatrix for Q8_0 / Q4_0 rows as the file stores them (entered
// only after best_available_isa() reported AVX2; F16 / BF16 and the super-block types read the
// repacked panels instead: float_panels_avx2.cpp, kquant_kernels_avx2.cpp). The activations are
// the scalar twin's Q8_0 blocks, each block's sum appended (for Q4_0's offset, below).
//
// Arithmetic: per row and token, each 32-value block's products are summed exactly as integers,
// then acc = fma(float(sum), d_w * d_x, acc), block after block, as the AVX-512 build does: the two
// builds give the same results bit for bit, and a token the same result alone or in any batch.
// The byte products use maddubs, which multiplies unsigned by signed bytes, so |w| meets x
// carrying w's sign (-128 * -127 pairs stay below the int16 limit), and maddwd sums the pairs.
//
// Two shapes of work:
//   Few tokens (decode, up to kPromptMinTokens - 1): tiles on the rows in place, a row's block in
//     one register: 8 rows x 1 token, or 4 rows x 2 tokens; per block, the 8 int32 lanes of each
//     (row, token) pair are summed across lanes for all 8 pairs at once (a tree of hadds), then
//     one float step for them all. Bound by the memory bandwidth.
//   Prompts: 16 rows at a time, a slice of their columns is first transposed so that a register
//     holds 4 columns of 8 rows (lanes = rows, as the AVX-512 panels), then a token's 4 activation
//     bytes, broadcast, meet 8 rows in one maddubs: for Q8_0 4 instructions per 32 products (sign,
//     maddubs, maddwd, add; Q4_0: 2) and a float step per block and 8 rows, where the row tiles
//     spend 5.5 and a lane sum per row. On Zen 3, sign, maddubs and maddwd share two ports;
//     a 512-token product of 8192 x 2048 runs 1.6-1.8x the row tiles' speed on one core (about 45
//     GMAC/s against 26), a 32-token one 1.5x. The transposition costs about what one token does,
//     hence the threshold.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "quantized_kernels.h"
#include "quantized_tile_driver.h"
#include "row_masks_avx2.h"

namespace pagedkv::quant_detail {
namespace {

// Unpack::load(row, b, d): block b of a row as 32 bytes in column order, and its fp16 d_w.
//   kOffset 0: the values themselves, signed (Q8_0).
//   kOffset 8: the levels w + 8, 0..15, unsigned (Q4_0): maddubs takes them as they are (no sign
//     trick), and each block's sum is corrected by -8 * sum(x); with |levels| <= 15 eight steps of
//     pair products fit an int16 lane (8 * 2 * 15 * 127 = 30,480), so prompts sum a block in int16.
struct UnpackQ8_0 {
  static constexpr int kOffset = 0;
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static __m256i load(const std::byte* row, int b, uint16_t& d) {
    const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
    d = blk.d;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.q));
  }
};

struct UnpackQ4_0 {
  static constexpr int kOffset = 8;
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_0);
  static __m256i load(const std::byte* row, int b, uint16_t& d) {
    const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
    d = blk.d;
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.q));
    const __m128i low_mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(packed, low_mask);  // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);  // elements 16..31
    return _mm256_set_m128i(hi, lo);
  }
  // The packed bytes of block b of two rows, row a's in the low lane.
  static __m256i load_pair(const std::byte* row_a, const std::byte* row_b, int b, uint16_t& d_a, uint16_t& d_b) {
    const BlockQ4_0& a = reinterpret_cast<const BlockQ4_0*>(row_a)[b];
    const BlockQ4_0& c = reinterpret_cast<const BlockQ4_0*>(row_b)[b];
    d_a = a.d;
    d_b = c.d;
    return _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c.q)),
                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.q)));
  }
};

// ---- prepared activations ------------------------------------------------------------------------
// Per token: the row's Q8_0 blocks as quantize_row_q8_0 writes them (the scalar twin's), then,
// 4-byte aligned, each block's sum of values (int32), for the offset of Q4_0's levels.

size_t sums_offset(int blocks) { return (static_cast<size_t>(blocks) * sizeof(BlockQ8_0) + 3) / 4 * 4; }

size_t prepared_bytes(int cols) {
  const int blocks = cols / kQuantBlock;
  return sums_offset(blocks) + static_cast<size_t>(blocks) * sizeof(int32_t);
}

void prepare(const float* x, int cols, std::byte* out) {
  const int blocks = cols / kQuantBlock;
  auto* q = reinterpret_cast<BlockQ8_0*>(out);
  quantize_row_q8_0({x, static_cast<size_t>(cols)}, q);
  auto* sums = reinterpret_cast<int32_t*>(out + sums_offset(blocks));
  for (int b = 0; b < blocks; ++b) {
    int32_t sum = 0;
    for (int8_t v : q[b].q) sum += v;
    sums[b] = sum;
  }
}

// A token's prepared activations from block b0 on.
struct TokenBlocks {
  const BlockQ8_0* q;
  const int32_t* sums;
  TokenBlocks() = default;
  TokenBlocks(const std::byte* token, int blocks, int b0)
      : q(reinterpret_cast<const BlockQ8_0*>(token) + b0),
        sums(reinterpret_cast<const int32_t*>(token + sums_offset(blocks)) + b0) {}
};

// Products of |w| (unsigned) and x carrying w's sign, summed in pairs and then in fours: 8 int32
// lanes, each the sum of 4 consecutive products.
__m256i products(__m256i w_abs, __m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// ---- few tokens: the rows in place ---------------------------------------------------------------

// The lane sums of v[0..3] as the 4 lanes of one vector.
__m128i sum_lanes(const __m256i (&v)[4]) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// The lane sums of v[0..7] as the 8 lanes of one vector.
__m256i sum_lanes(const __m256i (&v)[8]) {
  const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

// d_w of 4 or 8 rows as f32 lanes.
__m128 row_scales(const uint16_t (&d)[4]) {
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(d[0]), static_cast<int16_t>(d[1]), static_cast<int16_t>(d[2]),
                                     static_cast<int16_t>(d[3]), 0, 0, 0, 0));
}
__m256 row_scales(const uint16_t (&d)[8]) {
  return _mm256_cvtph_ps(_mm_setr_epi16(
      static_cast<int16_t>(d[0]), static_cast<int16_t>(d[1]), static_cast<int16_t>(d[2]), static_cast<int16_t>(d[3]),
      static_cast<int16_t>(d[4]), static_cast<int16_t>(d[5]), static_cast<int16_t>(d[6]), static_cast<int16_t>(d[7])));
}

// The integer sums of block b of each (row, token) pair of an R x T tile, lane t * R + r (4 lanes:
// xmm, 8: ymm), without Q4_0's offset; d: the rows' d_w.
//   Q8_0: a row's block is one register; each pair's 8 lanes of products are summed across lanes.
//   Q4_0: two rows' blocks share a register (row a's 16 packed bytes in the low lane, row b's in
//     the high), so that one and / shift / and yields both rows' levels of columns 0-15 (low
//     nibbles) and 16-31 (high), meeting x's two halves broadcast to both lanes: 4 lanes per row,
//     half the unpacking and lane sums of a register per row.
template <class Unpack, int R, int T>
auto block_sums(const std::byte* const* w, int b, const TokenBlocks* xt, uint16_t (&d)[R]) {
  constexpr int kPairs = R * T;
  if constexpr (Unpack::kOffset == 0) {
    __m256i q[R], q_abs[R];
    for (int r = 0; r < R; ++r) {
      q[r] = Unpack::load(w[r], b, d[r]);
      q_abs[r] = _mm256_sign_epi8(q[r], q[r]);
    }
    __m256i p[kPairs];
    for (int t = 0; t < T; ++t) {
      const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xt[t].q[b].q));
      for (int r = 0; r < R; ++r) p[t * R + r] = products(q_abs[r], q[r], qx);
    }
    return sum_lanes(p);
  } else {
    __m256i packed[R / 2];
    for (int j = 0; j < R / 2; ++j) packed[j] = Unpack::load_pair(w[2 * j], w[2 * j + 1], b, d[2 * j], d[2 * j + 1]);
    const __m256i low_mask = _mm256_set1_epi8(0x0F);
    __m256i v[kPairs / 2];  // v[k]: pairs 2k (low lane) and 2k + 1 (high lane)
    for (int t = 0; t < T; ++t) {
      const auto* xq = reinterpret_cast<const __m128i*>(xt[t].q[b].q);
      const __m256i x_lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq));
      const __m256i x_hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq + 1));
      for (int j = 0; j < R / 2; ++j) {
        const __m256i lo = _mm256_and_si256(packed[j], low_mask);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed[j], 4), low_mask);
        // 2 * 15 * 127 per pair of products: the two halves' sum stays far from the int16 limit
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x_lo), _mm256_maddubs_epi16(hi, x_hi));
        v[(t * R) / 2 + j] = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
      }
    }
    if constexpr (kPairs == 4) {
      const __m256i h1 = _mm256_hadd_epi32(v[0], v[1]);
      const __m256i h = _mm256_hadd_epi32(h1, h1);  // pairs 0, 2, 0, 2 | 1, 3, 1, 3
      return _mm_unpacklo_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    } else {
      const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
      const __m128i lo = _mm256_castsi256_si128(h), hi = _mm256_extracti128_si256(h, 1);  // pairs 0 2 4 6, 1 3 5 7
      return _mm256_set_m128i(_mm_unpackhi_epi32(lo, hi), _mm_unpacklo_epi32(lo, hi));
    }
  }
}

// R rows x T tokens, R * T = 4 or 8 (row, token) pairs, the lanes of one xmm or ymm register
// (lane t * R + r): per block, each pair's 8 lanes of products are summed across lanes for all
// pairs at once, then one float step for all of them.
template <class Unpack, int R>
struct RowTile {
  template <int T>
  static void tile(const std::byte* const* w, const std::byte* const* x, int cols, float* y, size_t y_stride,
                   int rows_out) {
    constexpr int kPairs = R * T;
    static_assert(kPairs == 4 || kPairs == 8);
    const int blocks = cols / kQuantBlock;
    TokenBlocks xt[T];
    for (int t = 0; t < T; ++t) xt[t] = TokenBlocks(x[t], blocks, 0);
    __m256 acc8 = _mm256_setzero_ps();
    __m128 acc4 = _mm_setzero_ps();
    const ptrdiff_t ahead = next_tile_offset<R>(w);
    for (int b = 0; b < blocks; ++b) {
      if (b % 2 == 0)
        for (int r = 0; r < R; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(w[r]) + static_cast<size_t>(b) * Unpack::kBlockBytes + ahead,
                       _MM_HINT_T0);
      uint16_t d[R];
      const auto sums = block_sums<Unpack, R, T>(w, b, xt, d);
      // Per token, the offset's share of the block's sum: -kOffset * sum(x).
      const auto offset = [&](int t) { return _mm_set1_epi32(-Unpack::kOffset * xt[t].sums[b]); };
      if constexpr (kPairs == 4) {
        const __m128i total = Unpack::kOffset != 0 ? _mm_add_epi32(sums, offset(0)) : sums;
        const __m128 scale = _mm_mul_ps(row_scales(d), _mm_set1_ps(half_to_float(xt[0].q[b].d)));
        acc4 = _mm_fmadd_ps(_mm_cvtepi32_ps(total), scale, acc4);
      } else {
        __m256i total = sums;
        __m256 dw, dx;
        if constexpr (R == 8) {
          if constexpr (Unpack::kOffset != 0) total = _mm256_add_epi32(total, _mm256_set_m128i(offset(0), offset(0)));
          dw = row_scales(d);
          dx = _mm256_set1_ps(half_to_float(xt[0].q[b].d));
        } else {
          if constexpr (Unpack::kOffset != 0) total = _mm256_add_epi32(total, _mm256_set_m128i(offset(1), offset(0)));
          const __m128 dw4 = row_scales(d);
          dw = _mm256_set_m128(dw4, dw4);
          dx = _mm256_set_m128(_mm_set1_ps(half_to_float(xt[1].q[b].d)), _mm_set1_ps(half_to_float(xt[0].q[b].d)));
        }
        acc8 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(dw, dx), acc8);
      }
    }
    alignas(32) float lanes[kPairs];
    if constexpr (kPairs == 4) _mm_store_ps(lanes, acc4);
    else _mm256_store_ps(lanes, acc8);
    for (int t = 0; t < T; ++t) std::copy_n(lanes + t * R, rows_out, y + static_cast<size_t>(t) * y_stride);
  }
};

// ---- prompts: slices transposed to lanes = rows --------------------------------------------------

constexpr int kPromptMinTokens = 8;  // at 2 and 4 tokens the transposed path ran 1.2-2.3x slower
constexpr int kSliceRows = 16;  // two registers of 8 rows
constexpr int kSliceBlocks = 32;  // 1,024 columns: 34 KiB transposed, in L1 / L2 for every token
constexpr int kStepsPerBlock = kQuantBlock / 4;

// A transposed block of the slice's 16 rows: per step s (columns 4s..4s+3), Q8_0: |w| of rows 0-7
// and 8-15, then w of rows 0-7 and 8-15 (the sign source); Q4_0: the levels of rows 0-7 and 8-15;
// then the 16 rows' d_w as f32.
template <class Unpack>
struct alignas(32) TransposedBlock {
  static constexpr int kRegisters = Unpack::kOffset == 0 ? 4 : 2;
  __m256i steps[kStepsPerBlock][kRegisters];
  float d[kSliceRows];
};

// Rows v[0..7] (32 bytes each) to out[j] = bytes 4j..4j+3 of every row, row i in lane i: an 8 x 8
// transpose of 32-bit elements.
void transpose_8x8(const __m256i (&v)[8], __m256i (&out)[8]) {
  __m256i a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);  // rows i, i+1: elements 0, 1 / 4, 5 interleaved
    a[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);  // 2, 3 / 6, 7
  }
  for (int i = 0; i < 8; i += 4)
    for (int k = 0; k < 2; ++k) {
      b[i + k] = _mm256_unpacklo_epi64(a[i + k], a[i + k + 2]);  // rows i..i+3, element 0 + 2k / 4 + 2k
      b[i + k + 2] = _mm256_unpackhi_epi64(a[i + k], a[i + k + 2]);  // 1 + 2k / 5 + 2k
    }
  // b[0]: rows 0-3 elements 0 (low lane) / 4 (high lane); b[2]: 1 / 5; b[1]: 2 / 6; b[3]: 3 / 7.
  constexpr int kFirst[4] = {0, 2, 1, 3};
  for (int j = 0; j < 4; ++j) {
    out[j] = _mm256_permute2x128_si256(b[kFirst[j]], b[4 + kFirst[j]], 0x20);
    out[j + 4] = _mm256_permute2x128_si256(b[kFirst[j]], b[4 + kFirst[j]], 0x31);
  }
}

// Blocks [b0, b0 + count) of rows `rows[0..15]` into `out`.
template <class Unpack>
void transpose_slice(const std::byte* const* rows, int b0, int count, TransposedBlock<Unpack>* out) {
  for (int b = 0; b < count; ++b) {
    TransposedBlock<Unpack>& tb = out[b];
    for (int half = 0; half < 2; ++half) {
      __m256i v[8], t[8];
      uint16_t d[8];
      for (int i = 0; i < 8; ++i) v[i] = Unpack::load(rows[8 * half + i], b0 + b, d[i]);
      transpose_8x8(v, t);
      for (int s = 0; s < kStepsPerBlock; ++s) {
        if constexpr (Unpack::kOffset == 0) {
          _mm256_store_si256(&tb.steps[s][half], _mm256_sign_epi8(t[s], t[s]));
          _mm256_store_si256(&tb.steps[s][2 + half], t[s]);
        } else {
          _mm256_store_si256(&tb.steps[s][half], t[s]);
        }
      }
      _mm256_store_ps(tb.d + 8 * half, row_scales(d));
    }
  }
}

int32_t load_4_bytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The slice's 16 rows x T tokens (x[t]: the token's activations from the slice's first block),
// over `blocks` transposed blocks; with `resume` the sums start from y (the preceding slices').
// The registers hold the block's integer sums (2 T), the step's weight registers (4, or 2 levels),
// a broadcast and the ones of maddwd; the float sums wait in L1 between blocks (a load and a store
// per block and 8 rows). Q8_0 sums each step's products to int32 (sign, maddubs, maddwd, add);
// Q4_0 sums the block's pair products in int16 and widens once per block (maddubs, add).
template <class Unpack, int T>
void prompt_tile(const TransposedBlock<Unpack>* tb, int blocks, const TokenBlocks* x, float* y, size_t y_stride,
                 int rows_out, bool resume) {
  alignas(32) float acc[2][T][8];
  for (int h = 0; h < 2; ++h) {
    const __m256i mask = rows_mask(rows_out - 8 * h);
    for (int t = 0; t < T; ++t)
      _mm256_store_ps(acc[h][t], resume ? _mm256_maskload_ps(y + static_cast<size_t>(t) * y_stride + 8 * h, mask)
                                        : _mm256_setzero_ps());
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int b = 0; b < blocks; ++b) {
    __m256i isum[2][T];
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < T; ++t) isum[h][t] = _mm256_setzero_si256();
#pragma GCC unroll 2  // no further: fully unrolled, GCC computed every step's products first and spilled them
    for (int s = 0; s < kStepsPerBlock; ++s) {
      const __m256i* step = tb[b].steps[s];
      const __m256i w0 = _mm256_load_si256(step), w1 = _mm256_load_si256(step + 1);
      [[maybe_unused]] __m256i sign0, sign1;
      if constexpr (Unpack::kOffset == 0) sign0 = _mm256_load_si256(step + 2), sign1 = _mm256_load_si256(step + 3);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        __m256i xv = _mm256_set1_epi32(load_4_bytes(x[t].q[b].q + 4 * s));
        asm volatile("" : "+x"(xv));  // one token after the other: GCC hoisted every token's signs and spilled
        if constexpr (Unpack::kOffset == 0) {
          isum[0][t] = _mm256_add_epi32(isum[0][t],
                                        _mm256_madd_epi16(_mm256_maddubs_epi16(w0, _mm256_sign_epi8(xv, sign0)), ones));
          isum[1][t] = _mm256_add_epi32(isum[1][t],
                                        _mm256_madd_epi16(_mm256_maddubs_epi16(w1, _mm256_sign_epi8(xv, sign1)), ones));
        } else {
          isum[0][t] = _mm256_add_epi16(isum[0][t], _mm256_maddubs_epi16(w0, xv));
          isum[1][t] = _mm256_add_epi16(isum[1][t], _mm256_maddubs_epi16(w1, xv));
        }
        // (through locals: an array element as an asm operand kept the whole array in memory)
        __m256i sum0 = isum[0][t], sum1 = isum[1][t];
        asm volatile("" : "+x"(sum0), "+x"(sum1));
        isum[0][t] = sum0;
        isum[1][t] = sum1;
      }
    }
    const __m256 dw0 = _mm256_load_ps(tb[b].d), dw1 = _mm256_load_ps(tb[b].d + 8);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      if constexpr (Unpack::kOffset != 0) {
        const __m256i offset = _mm256_set1_epi32(-Unpack::kOffset * x[t].sums[b]);
        isum[0][t] = _mm256_add_epi32(_mm256_madd_epi16(isum[0][t], ones), offset);
        isum[1][t] = _mm256_add_epi32(_mm256_madd_epi16(isum[1][t], ones), offset);
      }
      const __m256 dx = _mm256_set1_ps(half_to_float(x[t].q[b].d));
      _mm256_store_ps(acc[0][t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[0][t]), _mm256_mul_ps(dw0, dx),
                                                 _mm256_load_ps(acc[0][t])));
      _mm256_store_ps(acc[1][t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[1][t]), _mm256_mul_ps(dw1, dx),
                                                 _mm256_load_ps(acc[1][t])));
    }
  }
  for (int h = 0; h < 2; ++h) {
    if (rows_out <= 8 * h) continue;
    const __m256i mask = rows_mask(rows_out - 8 * h);
    for (int t = 0; t < T; ++t)
      _mm256_maskstore_ps(y + static_cast<size_t>(t) * y_stride + 8 * h, mask, _mm256_load_ps(acc[h][t]));
  }
}

constexpr int kPromptTokens = 3;  // 6 integer sums + 4 weights + broadcast + ones + temporaries: 16 registers

template <class Unpack>
void multiply_prompt(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  const int blocks = w.cols / kQuantBlock;
  const int n = x.num_tokens;
  TransposedBlock<Unpack> slice[kSliceBlocks];
  for (int r = r0; r < r1; r += kSliceRows) {
    const int rows_out = std::min(kSliceRows, r1 - r);
    const std::byte* rows[kSliceRows];
    for (int i = 0; i < kSliceRows; ++i)
      rows[i] = w.base + static_cast<size_t>(r + std::min(i, rows_out - 1)) * w.row_bytes;
    for (int b0 = 0; b0 < blocks; b0 += kSliceBlocks) {
      const int count = std::min(kSliceBlocks, blocks - b0);
      transpose_slice<Unpack>(rows, b0, count, slice);
      for (int t = 0; t < n; t += kPromptTokens) {
        const int tokens = std::min(kPromptTokens, n - t);
        TokenBlocks xt[kPromptTokens];
        for (int i = 0; i < tokens; ++i)
          xt[i] = TokenBlocks(x.data + static_cast<size_t>(t + i) * x.stride, blocks, b0);
        float* yt = y + static_cast<size_t>(t) * y_stride + static_cast<size_t>(r);
        const bool resume = b0 > 0;
        switch (tokens) {
          case 3:
            prompt_tile<Unpack, 3>(slice, count, xt, yt, y_stride, rows_out, resume);
            break;
          case 2:
            prompt_tile<Unpack, 2>(slice, count, xt, yt, y_stride, rows_out, resume);
            break;
          default:
            prompt_tile<Unpack, 1>(slice, count, xt, yt, y_stride, rows_out, resume);
            break;
        }
      }
    }
  }
}

// ---- the build -----------------------------------------------------------------------------------

template <class Unpack>
void multiply_with(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  if (x.num_tokens >= kPromptMinTokens) return multiply_prompt<Unpack>(w, r0, r1, x, y, y_stride);
  if (x.num_tokens == 1) return multiply_rows_tiled<8, 1, RowTile<Unpack, 8>>(w, r0, r1, x, y, y_stride);
  multiply_rows_tiled<4, 2, RowTile<Unpack, 4>>(w, r0, r1, x, y, y_stride);
}

void multiply_rows(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  if (w.type == TensorType::kQ8_0) return multiply_with<UnpackQ8_0>(w, r0, r1, x, y, y_stride);
  multiply_with<UnpackQ4_0>(w, r0, r1, x, y, y_stride);
}

}  // namespace

const RowsKernel& avx2_rows_kernel() {
  static const RowsKernel k{prepared_bytes, prepare, multiply_rows};
  return k;
}

}  // namespace pagedkv::quant_detail
