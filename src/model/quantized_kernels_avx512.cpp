// The AVX-512 build of QuantizedMatrix (F, VL, BW, DQ and VNNI; entered only after the run-time
// check in quantized_matrix.cpp).
//
// Q8_0 / Q4_0: tiles of 4 weight rows x up to 4 tokens, 16 accumulators of 16 floats in the 32
// zmm registers, two 32-value blocks per register. vpdpbusd multiplies unsigned by signed bytes,
// so the prepared activations are stored offset by 128 (x + 128 in 0..255, the XOR of the sign
// bit), and each weight block's term 128 * sum(w), computed once per weight block and shared by
// every token, starts the integer accumulator negated: the block sums stay exact, as in the
// scalar twin. Each block sum times d_w * d_x is then added in float, in 16 lanes.
//
// F16 / BF16: 8 weights widened to f32 per step, FMA with the f32 activations, in tiles of 4 rows
// x 3 tokens (12 accumulators: more than AVX2's 16 registers hold); the columns past the last
// multiple of 8 use masked loads. 8 lanes, not 16: on the Zen 4 this was measured on, 16-lane
// tiles (any of 4x1 to 8x2 rows x tokens) ran 20-30% below these, its 512-bit FMA and F16
// conversion being split in two halves, and masked loads inside the main loop cost another 10%.
//
// GCC 12 flags the deliberately undefined pass-through operands inside some AVX-512 intrinsics as
// uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <type_traits>
#include <vector>

#include "quantized_kernels.h"
#include "quantized_tile_driver.h"

namespace pagedkv::quant_detail {
namespace {

constexpr int kRows = 4;  // quantized tiles: 4 rows x 4 tokens of 16-lane accumulators
constexpr int kTokens = 4;
constexpr int kFloatRows = 4;  // F16/BF16 tiles: 4 rows x 3 tokens of 8-lane accumulators
constexpr int kFloatTokens = 3;

// ---- F16 / BF16 --------------------------------------------------------------------------------

struct WidenF16 {
  static __m256 load(const uint16_t* p, __mmask8 m) { return _mm256_cvtph_ps(_mm_maskz_loadu_epi16(m, p)); }
  static __m256 load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

struct WidenBF16 {
  static __m256 load(const uint16_t* p, __mmask8 m) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(m, p)), 16));
  }
  static __m256 load(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
};

template <class Widen>
struct FloatTile {
  template <int T>
  static void tile(const std::byte* const* w, const std::byte* const* x, int cols, float* y, size_t y_stride,
                   int rows_out) {
    const uint16_t* wr[kFloatRows];
    for (int r = 0; r < kFloatRows; ++r) wr[r] = reinterpret_cast<const uint16_t*>(w[r]);
    const float* xt[T];
    for (int t = 0; t < T; ++t) xt[t] = reinterpret_cast<const float*>(x[t]);
    __m256 acc[kFloatRows][T];
    for (int r = 0; r < kFloatRows; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    // One step of 8 columns; `m` masks the columns past the end (a partial last step).
    auto step = [&](int j, auto m) {
      constexpr bool kMasked = std::is_same_v<decltype(m), __mmask8>;
      __m256 wv[kFloatRows];
      for (int r = 0; r < kFloatRows; ++r) {
        if constexpr (kMasked) wv[r] = Widen::load(wr[r] + j, m);
        else wv[r] = Widen::load(wr[r] + j);
      }
      for (int t = 0; t < T; ++t) {
        __m256 xv;
        if constexpr (kMasked) xv = _mm256_maskz_loadu_ps(m, xt[t] + j);
        else xv = _mm256_loadu_ps(xt[t] + j);
        for (int r = 0; r < kFloatRows; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    };
    const ptrdiff_t ahead = next_tile_offset<kFloatRows>(w);
    int j = 0;
    for (; j + 32 <= cols; j += 32) {  // one 64-byte line of each row per iteration
      for (int r = 0; r < kFloatRows; ++r) _mm_prefetch(reinterpret_cast<const char*>(wr[r] + j) + ahead, _MM_HINT_T0);
      for (int k = 0; k < 32; k += 8) step(j + k, std::true_type{});
    }
    for (; j + 8 <= cols; j += 8) step(j, std::true_type{});
    if (j < cols) step(j, static_cast<__mmask8>((1u << (cols - j)) - 1));
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < rows_out; ++r) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r][t]), _mm256_extractf128_ps(acc[r][t], 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)] = _mm_cvtss_f32(s);
      }
  }
};

// ---- Q8_0 / Q4_0 -------------------------------------------------------------------------------

// Prepared activations: per pair of blocks, 64 bytes x + 128 and 16 floats d_x (8 of each block's);
// an odd last block is paired with a zero block (x + 128 = 128, d_x = 0).
constexpr size_t kPairBytes = 64 + 16 * sizeof(float);

size_t prepared_bytes(int cols) { return static_cast<size_t>((cols / kQuantBlock + 1) / 2) * kPairBytes; }

void prepare(const float* x, int cols, std::byte* out) {
  const int blocks = cols / kQuantBlock;
  thread_local std::vector<BlockQ8_0> q;
  q.resize(static_cast<size_t>(blocks));
  quantize_row_q8_0({x, static_cast<size_t>(cols)}, q.data());
  for (int b = 0; b < blocks; b += 2) {
    std::byte* pair = out + static_cast<size_t>(b / 2) * kPairBytes;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[static_cast<size_t>(b)].q));
    const bool both = b + 1 < blocks;
    const __m256i hi = both ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[static_cast<size_t>(b) + 1].q))
                            : _mm256_setzero_si256();
    const __m512i xu = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                                        _mm512_set1_epi8(static_cast<char>(0x80)));
    _mm512_storeu_si512(pair, xu);
    const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(q[static_cast<size_t>(b)].d)),
                                        _mm256_set1_ps(both ? _cvtsh_ss(q[static_cast<size_t>(b) + 1].d) : 0.0f), 1);
    _mm512_storeu_ps(reinterpret_cast<float*>(pair + 64), d);
  }
}

// Two F16 block scales as [d0 x 8, d1 x 8]: one conversion and one permute.
__m512 pair_scales(uint16_t d0, uint16_t d1) {
  const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d0 | (static_cast<uint32_t>(d1) << 16))));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_castps128_ps512(both));
}

// Weight blocks b and b + 1 (or b alone) as 64 signed bytes and their scales, 8 lanes each.
struct UnpackQ8_0 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  template <bool kBoth>
  static void load(const std::byte* row, int b, __m512i& q, __m512& d) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].q));
    __m256i hi = _mm256_setzero_si256();
    uint16_t d1 = 0;
    if constexpr (kBoth) {
      hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].q));
      d1 = blk[1].d;
    }
    q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    d = pair_scales(blk[0].d, d1);
  }
};

struct UnpackQ4_0 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_0);
  template <bool kBoth>
  static void load(const std::byte* row, int b, __m512i& q, __m512& d) {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    const __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].q));
    __m128i p1 = _mm_setzero_si128();
    uint16_t d1 = 0;
    if constexpr (kBoth) {
      p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].q));
      d1 = blk[1].d;
    }
    const __m256i packed = _mm256_set_m128i(p1, p0);
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(packed, nibble);                         // elements 0..15 of each block
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);  // elements 16..31
    // [lo0 lo1 hi0 hi1] -> [lo0 hi0 lo1 hi1], then 0..15 -> -8..7.
    const __m512i grouped = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    q = _mm512_sub_epi8(_mm512_shuffle_i64x2(grouped, grouped, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(8));
    d = pair_scales(blk[0].d, d1);
  }
};

template <class Unpack>
struct QuantTile {
  template <int T, bool kBoth>
  static void pair(const std::byte* const* w, const std::byte* const* x, int b, __m512 (&acc)[kRows][T]) {
    const size_t at = static_cast<size_t>(b / 2) * kPairBytes;
    __m512i xu[T];
    __m512 dx[T];
    for (int t = 0; t < T; ++t) {
      xu[t] = _mm512_loadu_si512(x[t] + at);
      dx[t] = _mm512_loadu_ps(reinterpret_cast<const float*>(x[t] + at + 64));
    }
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int r = 0; r < kRows; ++r) {
      __m512i q;
      __m512 dw;
      Unpack::template load<kBoth>(w[r], b, q, dw);
      const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, q));
      for (int t = 0; t < T; ++t) {
        const __m512i sums = _mm512_dpbusd_epi32(start, xu[t], q);  // sum of x * w, exact
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw, dx[t]), acc[r][t]);
      }
    }
  }

  template <int T>
  static void tile(const std::byte* const* w, const std::byte* const* x, int cols, float* y, size_t y_stride,
                   int rows_out) {
    const int blocks = cols / kQuantBlock;
    __m512 acc[kRows][T];
    for (int r = 0; r < kRows; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    int b = 0;
    const ptrdiff_t ahead = next_tile_offset<kRows>(w);
    for (; b + 2 <= blocks; b += 2) {
      for (int r = 0; r < kRows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w[r]) + static_cast<size_t>(b) * Unpack::kBlockBytes + ahead,
                     _MM_HINT_T0);
      pair<T, true>(w, x, b, acc);
    }
    if (b < blocks) pair<T, false>(w, x, b, acc);
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < rows_out; ++r) y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)] = _mm512_reduce_add_ps(acc[r][t]);
  }
};

void multiply_rows(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  switch (w.type) {
    case TensorType::kF16: multiply_rows_tiled<kFloatRows, kFloatTokens, FloatTile<WidenF16>>(w, r0, r1, x, y, y_stride); break;
    case TensorType::kBF16: multiply_rows_tiled<kFloatRows, kFloatTokens, FloatTile<WidenBF16>>(w, r0, r1, x, y, y_stride); break;
    case TensorType::kQ8_0: multiply_rows_tiled<kRows, kTokens, QuantTile<UnpackQ8_0>>(w, r0, r1, x, y, y_stride); break;
    default: multiply_rows_tiled<kRows, kTokens, QuantTile<UnpackQ4_0>>(w, r0, r1, x, y, y_stride); break;
  }
}

}  // namespace

const RowsKernel& avx512_rows_kernel() {
  static const RowsKernel k{prepared_bytes, prepare, multiply_rows};
  return k;
}

}  // namespace pagedkv::quant_detail
