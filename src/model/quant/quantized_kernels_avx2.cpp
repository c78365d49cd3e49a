// The AVX2+FMA+F16C builds of QuantizedMatrix for Q8_0 and Q4_0 (entered only after
// best_available_isa() reported AVX2): Q8_0 rows as the file stores them; Q4_0 on the AVX-512
// build's panels (quantized_panels.h). F16 / BF16 and the super-block types read panels too:
// float_panels_avx2.cpp, kquant_kernels_avx2.cpp. The activations are the scalar twin's Q8_0
// blocks with their scales as f32, for Q4_0 each block's offset appended (below).
//
// Arithmetic: per row and token, each 32-value block's products are summed exactly as integers,
// then acc = fma(float(sum), d_w * d_x, acc), block after block, as the AVX-512 build does: the two
// builds give the same results bit for bit, and a token the same result alone or in any batch.
// The byte products use maddubs, which multiplies unsigned by signed bytes: Q8_0's |w| meets x
// carrying w's sign (-128 * -127 pairs stay below the int16 limit), and maddwd sums the pairs;
// Q4_0's levels w + 8 (0..15) are unsigned as they are, and each block's sum is corrected by
// -8 * sum(x).
//
// Q8_0, two shapes of work:
//   Few tokens (decode, up to kPromptMinTokens - 1): tiles on the rows in place, a row's block in
//     one register: 8 rows x 1 token, or 4 rows x 2 tokens; per block, the 8 int32 lanes of each
//     (row, token) pair are summed across lanes for all 8 pairs at once (a tree of hadds), then
//     one float step for them all. Bound by the memory bandwidth.
//   Prompts: 16 rows at a time, a slice of their columns is first transposed so that a register
//     holds 4 columns of 8 rows (lanes = rows, as the AVX-512 panels), then a token's 4 activation
//     bytes, broadcast, meet 8 rows in one maddubs: 4 instructions per 32 products (sign, maddubs,
//     maddwd, add) and a float step per block and 8 rows, where the row tiles spend 5.5 and a
//     lane sum per row. On Zen 3 maddubs and maddwd share two of the four vector pipes (83-97
//     GMAC/s a core for the pair); a 512-token product of 8192 x 2048 runs at 53-57 GMAC/s on one
//     core, twice the row tiles. The transposition costs about what one token does, hence the
//     threshold (kPromptMinTokens).
// Q4_0 reads its panels (below): tiles of up to 3 tokens on the panel for few tokens; for prompts,
// the levels of a slice of the panel unpacked once to the transposed slices' layout, so that the
// prompt tiles serve both types.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "lanes_avx2.h"
#include "quantized_kernels.h"
#include "quantized_tile_driver.h"

namespace pagedkv::quant_detail {
namespace {

// The two types' values as the prompt tiles take them:
//   kOffset 0: the values themselves, signed (Q8_0); load(row, b, d): block b of a row as 32 bytes
//     in column order, and its fp16 d_w.
//   kOffset 8: the levels w + 8, 0..15, unsigned (Q4_0): maddubs takes them as they are (no sign
//     trick), and each block's sum is corrected by -8 * sum(x); with |levels| <= 15 eight steps of
//     pair products fit an int16 lane (8 * 2 * 15 * 127 = 30,480), so prompts sum a block in int16.
struct UnpackQ8_0 {
  static constexpr int kOffset = 0;
  static __m256i load(const std::byte* row, int b, uint16_t& d) {
    const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
    d = blk.d;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.q));
  }
};

// Q4_0 (read from its panels, below): no loads of its own.
struct UnpackQ4_0 {
  static constexpr int kOffset = 8;
};

// ---- prepared activations ------------------------------------------------------------------------
// Per token: the row's Q8_0 blocks as quantize_row_q8_0 writes them (the scalar twin's); then,
// 4-byte aligned, each block's d_x as f32 (the tiles' float step broadcasts it from memory, in place
// of a conversion per block and token); for a type with an offset (Q4_0's levels) then each
// block's offset, -kOffset times the sum of its values (int32).

size_t scales_offset(int blocks) { return (static_cast<size_t>(blocks) * sizeof(BlockQ8_0) + 3) / 4 * 4; }
size_t offsets_offset(int blocks) { return scales_offset(blocks) + static_cast<size_t>(blocks) * sizeof(float); }

template <class Unpack>
size_t prepared_bytes(int cols) {
  const int blocks = cols / kQuantBlock;
  return offsets_offset(blocks) + (Unpack::kOffset == 0 ? 0 : static_cast<size_t>(blocks) * sizeof(int32_t));
}

float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// A token's row quantized to Q8_0 as quantize_row_q8_0 does (d = amax / 127, values
// round(x * 127 / amax) with ties to even: the conversion's default rounding mode, as nearbyint
// there), 8 lanes at a time; equal to it for finite inputs (tested), as the AVX-512 build's. With
// each block's d as f32 and, for a type with an offset, its offset.
template <class Unpack>
void prepare(const float* x, int cols, std::byte* out) {
  const int blocks = cols / kQuantBlock;
  auto* q = reinterpret_cast<BlockQ8_0*>(out);
  auto* scales = reinterpret_cast<float*>(out + scales_offset(blocks));
  [[maybe_unused]] auto* offsets = reinterpret_cast<int32_t*>(out + offsets_offset(blocks));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int b = 0; b < blocks; ++b) {
    __m256 v[4];
    __m256 amax8 = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + static_cast<size_t>(b) * kQuantBlock + 8 * i);
      amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[i]));
    }
    const float amax = max_lane(amax8);
    // F16C's conversion rounds to nearest even, as f32_to_f16 (float_convert.h, not included: its
    // inline body would be compiled for AVX2 here and could be the copy the linker keeps).
    q[b].d = _cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);
    scales[b] = half_to_float(q[b].d);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i codes[4];
    for (int i = 0; i < 4; ++i) codes[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    const __m256i stored = codes_as_bytes(codes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q[b].q), stored);
    if constexpr (Unpack::kOffset != 0) {
      // The sum of the codes as stored (pairs, then fours, then the 8 lanes).
      const __m256i fours = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), stored), _mm256_set1_epi16(1));
      __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(fours), _mm256_extracti128_si256(fours, 1));
      sum = _mm_add_epi32(sum, _mm_unpackhi_epi64(sum, sum));
      sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 1));
      offsets[b] = -Unpack::kOffset * _mm_cvtsi128_si32(sum);
    }
  }
}

// A token's prepared activations (for Unpack's type) from block b0 on.
struct TokenBlocks {
  const BlockQ8_0* q;
  const float* d;  // each block's d_x
  const int32_t* offsets;  // null without an offset
  template <class Unpack>
  static TokenBlocks of(const std::byte* token, int blocks, int b0) {
    return {reinterpret_cast<const BlockQ8_0*>(token) + b0,
            reinterpret_cast<const float*>(token + scales_offset(blocks)) + b0,
            Unpack::kOffset == 0 ? nullptr : reinterpret_cast<const int32_t*>(token + offsets_offset(blocks)) + b0};
  }
};

// Products of |w| (unsigned) and x carrying w's sign, summed in pairs and then in fours: 8 int32
// lanes, each the sum of 4 consecutive products.
__m256i products(__m256i w_abs, __m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

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
// xmm, 8: ymm); d: the rows' d_w. A row's block is one register; each pair's 8 lanes of products
// are summed across lanes.
template <int R, int T>
auto block_sums(const std::byte* const* w, int b, const TokenBlocks* xt, uint16_t (&d)[R]) {
  __m256i q[R], q_abs[R];
  for (int r = 0; r < R; ++r) {
    q[r] = UnpackQ8_0::load(w[r], b, d[r]);
    q_abs[r] = _mm256_sign_epi8(q[r], q[r]);
  }
  __m256i p[R * T];
  for (int t = 0; t < T; ++t) {
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xt[t].q[b].q));
    for (int r = 0; r < R; ++r) p[t * R + r] = products(q_abs[r], q[r], qx);
  }
  return sum_lanes(p);
}

// R rows x T tokens, R * T = 4 or 8 (row, token) pairs, the lanes of one xmm or ymm register
// (lane t * R + r): per block, each pair's 8 lanes of products are summed across lanes for all
// pairs at once, then one float step for all of them.
template <int R>
struct RowTile {
  template <int T>
  static void tile(const std::byte* const* w, const std::byte* const* x, int cols, float* y, size_t y_stride,
                   int rows_out) {
    constexpr int kPairs = R * T;
    static_assert(kPairs == 4 || kPairs == 8);
    const int blocks = cols / kQuantBlock;
    TokenBlocks xt[T];
    for (int t = 0; t < T; ++t) xt[t] = TokenBlocks::of<UnpackQ8_0>(x[t], blocks, 0);
    __m256 acc8 = _mm256_setzero_ps();
    __m128 acc4 = _mm_setzero_ps();
    const ptrdiff_t ahead = next_tile_offset<R>(w);
    for (int b = 0; b < blocks; ++b) {
      if (b % 2 == 0)
        for (int r = 0; r < R; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(w[r]) + static_cast<size_t>(b) * sizeof(BlockQ8_0) + ahead,
                       _MM_HINT_T0);
      uint16_t d[R];
      const auto total = block_sums<R, T>(w, b, xt, d);
      if constexpr (kPairs == 4) {
        const __m128 scale = _mm_mul_ps(row_scales(d), _mm_set1_ps(xt[0].d[b]));
        acc4 = _mm_fmadd_ps(_mm_cvtepi32_ps(total), scale, acc4);
      } else {
        __m256 dw, dx;
        if constexpr (R == 8) {
          dw = row_scales(d);
          dx = _mm256_set1_ps(xt[0].d[b]);
        } else {
          const __m128 dw4 = row_scales(d);
          dw = _mm256_set_m128(dw4, dw4);
          dx = _mm256_set_m128(_mm_set1_ps(xt[1].d[b]), _mm_set1_ps(xt[0].d[b]));
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

// From 6 tokens on the transposed path: a 1B Q8_0 decode step on Zen 3 (2 threads) at 3 tokens ran
// 1.0-1.25x slower than on the row tiles, at 5 as fast, at 6 and 7 10-25 % faster.
constexpr int kPromptMinTokens = 6;
constexpr int kSliceRows = 16;  // two registers of 8 rows
constexpr int kSliceBlocks = 32;  // 1,024 columns: 34 KiB transposed, in L1 / L2 for every token
constexpr int kStepsPerBlock = kQuantBlock / 4;

// A transposed block of the slice's 16 rows: per step s (columns 4s..4s+3), Q8_0: |w| of rows 0-7
// and 8-15, then w of rows 0-7 and 8-15 (the sign source); Q4_0: the levels of rows 0-7 and 8-15
// (unpacked from its panel, which holds them in this order already); then the 16 rows' d_w as f32.
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

// Blocks [b0, b0 + count) of Q8_0 rows `rows[0..15]` into `out`.
void transpose_slice(const std::byte* const* rows, int b0, int count, TransposedBlock<UnpackQ8_0>* out) {
  for (int b = 0; b < count; ++b) {
    TransposedBlock<UnpackQ8_0>& tb = out[b];
    for (int half = 0; half < 2; ++half) {
      __m256i v[8], t[8];
      uint16_t d[8];
      for (int i = 0; i < 8; ++i) v[i] = UnpackQ8_0::load(rows[8 * half + i], b0 + b, d[i]);
      transpose_8x8(v, t);
      for (int s = 0; s < kStepsPerBlock; ++s) {
        _mm256_store_si256(&tb.steps[s][half], _mm256_sign_epi8(t[s], t[s]));
        _mm256_store_si256(&tb.steps[s][2 + half], t[s]);
      }
      _mm256_store_ps(tb.d + 8 * half, row_scales(d));
    }
  }
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
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t)
      _mm256_store_ps(acc[h][t], resume ? load_rows(y + static_cast<size_t>(t) * y_stride + 8 * h, rows_out - 8 * h)
                                        : _mm256_setzero_ps());
  const __m256i ones = _mm256_set1_epi16(1);
  for (int b = 0; b < blocks; ++b) {
    // The block's 8 steps unrolled: GCC then keeps each sum in one register (unrolled by 2 it
    // copied every sum once a step: a sixth of the loop's instructions).
    __m256i isum[2][T];
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < T; ++t) isum[h][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < kStepsPerBlock; ++s) {
      const __m256i* step = tb[b].steps[s];
      const __m256i w0 = _mm256_load_si256(step), w1 = _mm256_load_si256(step + 1);
      [[maybe_unused]] __m256i sign0, sign1;
      if constexpr (Unpack::kOffset == 0) sign0 = _mm256_load_si256(step + 2), sign1 = _mm256_load_si256(step + 3);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        __m256i xv = broadcast_4_bytes(x[t].q[b].q + 4 * s);
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
        const __m256i offset = _mm256_set1_epi32(x[t].offsets[b]);
        isum[0][t] = _mm256_add_epi32(_mm256_madd_epi16(isum[0][t], ones), offset);
        isum[1][t] = _mm256_add_epi32(_mm256_madd_epi16(isum[1][t], ones), offset);
      }
      const __m256 dx = _mm256_broadcast_ss(x[t].d + b);
      _mm256_store_ps(acc[0][t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[0][t]), _mm256_mul_ps(dw0, dx),
                                                 _mm256_load_ps(acc[0][t])));
      _mm256_store_ps(acc[1][t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[1][t]), _mm256_mul_ps(dw1, dx),
                                                 _mm256_load_ps(acc[1][t])));
    }
  }
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t)
      store_rows(y + static_cast<size_t>(t) * y_stride + 8 * h, rows_out - 8 * h, _mm256_load_ps(acc[h][t]));
}

constexpr int kPromptTokens = 3;  // 6 integer sums + 4 weights + broadcast + ones + temporaries: 16 registers

// f(std::integral_constant<int, T>{}) for T = tokens, 1 to 3: the tiles' token counts as template arguments.
template <class F>
void with_token_count(int tokens, F&& f) {
  switch (tokens) {
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    default:
      return f(std::integral_constant<int, 1>{});
  }
}

// Every token of the batch, kPromptTokens at a time, over one slice: blocks [b0, b0 + count) of
// the 16 rows from r (rows_out of them real); a token's activations are x.data + t * token_bytes.
template <class Unpack>
void prompt_slice(const TransposedBlock<Unpack>* slice, int b0, int count, int blocks, const Activations& x,
                  size_t token_bytes, float* y, size_t y_stride, int r, int rows_out) {
  for (int t = 0; t < x.num_tokens; t += kPromptTokens) {
    const int tokens = std::min(kPromptTokens, x.num_tokens - t);
    TokenBlocks xt[kPromptTokens];
    for (int i = 0; i < tokens; ++i)
      xt[i] = TokenBlocks::of<Unpack>(x.data + static_cast<size_t>(t + i) * token_bytes, blocks, b0);
    float* yt = y + static_cast<size_t>(t) * y_stride + static_cast<size_t>(r);
    with_token_count(tokens, [&](auto T) {
      prompt_tile<Unpack, decltype(T)::value>(slice, count, xt, yt, y_stride, rows_out, b0 > 0);
    });
  }
}

// Q8_0 rows [r0, r1): 16 rows at a time, slice after slice transposed.
void multiply_prompt(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  const int blocks = w.cols / kQuantBlock;
  TransposedBlock<UnpackQ8_0> slice[kSliceBlocks];
  for (int r = r0; r < r1; r += kSliceRows) {
    const int rows_out = std::min(kSliceRows, r1 - r);
    const std::byte* rows[kSliceRows];
    for (int i = 0; i < kSliceRows; ++i)
      rows[i] = w.base + static_cast<size_t>(r + std::min(i, rows_out - 1)) * w.row_bytes;
    for (int b0 = 0; b0 < blocks; b0 += kSliceBlocks) {
      const int count = std::min(kSliceBlocks, blocks - b0);
      transpose_slice(rows, b0, count, slice);
      prompt_slice(slice, b0, count, blocks, x, x.stride, y, y_stride, r, rows_out);
    }
  }
}

// ---- Q4_0 panels ----------------------------------------------------------------------------------
// The AVX-512 build's Q4_0 panels (quantized_panels.h), each 64-byte register of 16 rows x 4 bytes
// read as two halves of 8 rows: register v holds bytes 4v..4v+3 of every row's block, whose low
// nibbles are the levels of columns 4v.. and whose high nibbles those of columns 16 + 4v... Lanes
// are rows, so a token's 4 activation bytes, broadcast, meet 8 rows in one maddubs, and a panel
// is one stream (its scales a second, an eighth of its size).
//   Few tokens: tiles of up to 3 tokens on the panel itself, block by block. Per block and (row,
//     token): 8 maddubs pair sums added as int16 (8 * 2 * 15 * 127 = 30,480 at most), widened
//     once, then Q4_0's offset and the float step of the Q8_0 tiles, so the results are the
//     scalar twin's bit for bit. One token from memory, 65536 x 2048 on a Zen 3 core, ran 17-23 %
//     faster than the former tiles on the rows in place (8 row streams, a lane sum per row).
//   Prompts: a slice of the panel's levels unpacked once (an and, or a shift and an and, per
//     register and half) into the transposed blocks' layout, which the prompt tiles then read for
//     every token; the tiles on the panel itself ran 512 tokens 25-50 % slower.

// Tokens per tile: 2 halves x 3 tokens of int16 sums, 4 registers of levels, 2 broadcasts, the mask.
constexpr int kPanelTileTokens = 3;

// Prefetch distance within a panel's quants (its scales: an eighth of it). A decode token reads
// the stream as fast as memory delivers, far ahead of the hardware prefetcher's reach.
template <int T>
constexpr size_t kPanelPrefetchAhead = T == 1 ? 8192 : 2048;

// The levels of half h (rows 8h..8h+7) of the panel register at `reg`: its low nibbles (columns
// 4v..4v+3 of the block for register v) and its high nibbles (columns 16 + 4v..).
struct PanelLevels {
  __m256i lo, hi;
};
PanelLevels panel_levels(const std::byte* reg, int h) {
  const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(reg + 32 * h));
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  return {_mm256_and_si256(q, low_mask), _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask)};
}

// One panel's 16 rows x T tokens (x[t]: token t's activations), every block.
template <int T>
void q4_0_panel_tile(const std::byte* panel, size_t scales_at, const TokenBlocks* x, int blocks, float* y,
                     size_t y_stride, int rows_out) {
  __m256 acc[2][T];
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int b = 0; b < blocks; ++b) {
    const std::byte* quants = panel + static_cast<size_t>(b) * 256;
    const std::byte* d_w = panel + scales_at + static_cast<size_t>(b) * 32;
    if (b % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(d_w + kPanelPrefetchAhead<T> / 8), _MM_HINT_T0);
    __m256i isum[2][T];
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < T; ++t) isum[h][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(quants + kPanelPrefetchAhead<T> + 64 * v), _MM_HINT_T0);
      const PanelLevels levels[2] = {panel_levels(quants + 64 * v, 0), panel_levels(quants + 64 * v, 1)};
#pragma GCC unroll 3
      for (int t = 0; t < T; ++t) {
        const int8_t* xq = x[t].q[b].q;
        const __m256i x_lo = broadcast_4_bytes(xq + 4 * v), x_hi = broadcast_4_bytes(xq + 16 + 4 * v);
        for (int h = 0; h < 2; ++h)
          isum[h][t] = _mm256_add_epi16(isum[h][t], _mm256_add_epi16(_mm256_maddubs_epi16(levels[h].lo, x_lo),
                                                                     _mm256_maddubs_epi16(levels[h].hi, x_hi)));
      }
    }
    const __m256 dw[2] = {_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d_w))),
                          _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d_w + 16)))};
#pragma GCC unroll 3
    for (int t = 0; t < T; ++t) {
      const __m256i offset = _mm256_set1_epi32(x[t].offsets[b]);
      const __m256 dx = _mm256_broadcast_ss(x[t].d + b);
      for (int h = 0; h < 2; ++h) {
        const __m256i total = _mm256_add_epi32(_mm256_madd_epi16(isum[h][t], ones), offset);
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(dw[h], dx), acc[h][t]);
      }
    }
  }
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < T; ++t) store_rows(y + static_cast<size_t>(t) * y_stride + 8 * h, rows_out - 8 * h, acc[h][t]);
}

size_t q4_0_panels_prepared_bytes(TensorType, int cols, int num_tokens) {
  return prepared_bytes<UnpackQ4_0>(cols) * static_cast<size_t>(num_tokens);
}

// Blocks [b0, b0 + count) of a panel's levels and scales into `out`.
void unpack_panel_slice(const std::byte* panel, size_t scales_at, int b0, int count, TransposedBlock<UnpackQ4_0>* out) {
  for (int b = 0; b < count; ++b) {
    const std::byte* quants = panel + static_cast<size_t>(b0 + b) * 256;
    const std::byte* d_w = panel + scales_at + static_cast<size_t>(b0 + b) * 32;
    TransposedBlock<UnpackQ4_0>& tb = out[b];
    for (int v = 0; v < 4; ++v)
      for (int h = 0; h < 2; ++h) {
        const PanelLevels levels = panel_levels(quants + 64 * v, h);
        _mm256_store_si256(&tb.steps[v][h], levels.lo);
        _mm256_store_si256(&tb.steps[4 + v][h], levels.hi);
      }
    for (int h = 0; h < 2; ++h)
      _mm256_store_ps(tb.d + 8 * h, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d_w + 16 * h))));
  }
}

// Every token's activations as prepare() writes them, one after the other.
void q4_0_panels_prepare(TensorType, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out) {
  const size_t token_bytes = prepared_bytes<UnpackQ4_0>(cols);
  for (int t = 0; t < num_tokens; ++t)
    prepare<UnpackQ4_0>(x + static_cast<size_t>(t) * x_stride, cols, out + static_cast<size_t>(t) * token_bytes);
}

// Panel by panel, every group of tokens over a panel right after the first brought it in.
void q4_0_multiply_panels(const WeightPanels& w, int p0, int p1, const Activations& acts, float* y, size_t y_stride) {
  const PanelLayout& l = w.layout;
  const int blocks = l.cols / kQuantBlock;
  const size_t token_bytes = prepared_bytes<UnpackQ4_0>(l.cols);
  if (acts.num_tokens >= kPromptMinTokens) {
    TransposedBlock<UnpackQ4_0> slice[kSliceBlocks];
    for (int p = p0; p < p1; ++p) {
      const std::byte* panel = w.base + static_cast<size_t>(p) * l.panel_bytes;
      const int rows_out = std::min(kPanelRows, l.rows - p * kPanelRows);
      for (int b0 = 0; b0 < blocks; b0 += kSliceBlocks) {
        const int count = std::min(kSliceBlocks, blocks - b0);
        unpack_panel_slice(panel, l.scales_at, b0, count, slice);
        prompt_slice(slice, b0, count, blocks, acts, token_bytes, y, y_stride, p * kPanelRows, rows_out);
      }
    }
    return;
  }
  for (int p = p0; p < p1; ++p) {
    const std::byte* panel = w.base + static_cast<size_t>(p) * l.panel_bytes;
    const int rows_out = std::min(kPanelRows, l.rows - p * kPanelRows);
    for (int t0 = 0; t0 < acts.num_tokens; t0 += kPanelTileTokens) {
      const int tokens = std::min(kPanelTileTokens, acts.num_tokens - t0);
      TokenBlocks xt[kPanelTileTokens];
      for (int i = 0; i < tokens; ++i)
        xt[i] = TokenBlocks::of<UnpackQ4_0>(acts.data + static_cast<size_t>(t0 + i) * token_bytes, blocks, 0);
      float* yt = y + static_cast<size_t>(t0) * y_stride + static_cast<size_t>(p) * kPanelRows;
      with_token_count(tokens, [&](auto T) {
        q4_0_panel_tile<decltype(T)::value>(panel, l.scales_at, xt, blocks, yt, y_stride, rows_out);
      });
    }
  }
}

// ---- the build -----------------------------------------------------------------------------------

// Q8_0 rows.
void multiply_rows(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  if (x.num_tokens >= kPromptMinTokens) return multiply_prompt(w, r0, r1, x, y, y_stride);
  if (x.num_tokens == 1) return multiply_rows_tiled<8, 1, RowTile<8>>(w, r0, r1, x, y, y_stride);
  multiply_rows_tiled<4, 2, RowTile<4>>(w, r0, r1, x, y, y_stride);
}

}  // namespace

const RowsKernel& avx2_rows_kernel() {
  static const RowsKernel k{prepared_bytes<UnpackQ8_0>, prepare<UnpackQ8_0>, multiply_rows};
  return k;
}

const PanelsKernel& avx2_q4_0_panels_kernel() {
  static const PanelsKernel k{q4_0_panels_prepared_bytes, q4_0_panels_prepare, q4_0_multiply_panels};
  return k;
}

}  // namespace pagedkv::quant_detail
