// The AVX2+FMA+F16C build of QuantizedMatrix for Q8_0 / Q4_0 rows as the file stores them (entered
// only after best_available_isa() reported AVX2; F16 / BF16 and the super-block types read the
// repacked panels instead: float_panels_avx2.cpp, kquant_kernels_avx2.cpp). Tiles of 4 weight rows
// x up to 2 tokens: 8 accumulators of 8 floats plus the weight vectors fit the 16 ymm registers.
//
// One 32-value block per register; the byte products use maddubs, which multiplies unsigned by
// signed bytes, so |w| meets x carrying w's sign (-128 * -127 pairs stay below the int16 limit).
// Integer block sums are exact, as in the scalar twin; each times d_w * d_x is added in float, in
// 8 lanes. The activations are plain Q8_0 blocks, as in the scalar twin.
#include <immintrin.h>

#include "quantized_kernels.h"
#include "quantized_tile_driver.h"

namespace pagedkv::quant_detail {
namespace {

constexpr int kRows = 4;
constexpr int kTokens = 2;

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of products of 32 signed bytes, as 8 int32 lanes: |w| (unsigned) times x carrying w's sign.
__m256i block_products(__m256i w_abs, __m256i w, __m256i x) {
  const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

struct UnpackQ8_0 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static __m256i load(const std::byte* row, int b, float& d) {
    const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
    d = _cvtsh_ss(blk.d);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.q));
  }
};

struct UnpackQ4_0 {
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_0);
  static __m256i load(const std::byte* row, int b, float& d) {
    const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
    d = _cvtsh_ss(blk.d);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.q));
    const __m128i low_mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(packed, low_mask);  // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);  // elements 16..31
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
  }
};

template <class Unpack>
struct QuantTile {
  template <int T>
  static void tile(const std::byte* const* w, const std::byte* const* x, int cols, float* y, size_t y_stride,
                   int rows_out) {
    const int blocks = cols / kQuantBlock;
    const BlockQ8_0* xt[T];
    for (int t = 0; t < T; ++t) xt[t] = reinterpret_cast<const BlockQ8_0*>(x[t]);
    __m256 acc[kRows][T];
    for (int r = 0; r < kRows; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    const ptrdiff_t ahead = next_tile_offset<kRows>(w);
    for (int b = 0; b < blocks; ++b) {
      if (b % 2 == 0)
        for (int r = 0; r < kRows; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(w[r]) + static_cast<size_t>(b) * Unpack::kBlockBytes + ahead,
                       _MM_HINT_T0);
      float dx[T];
      for (int t = 0; t < T; ++t) dx[t] = _cvtsh_ss(xt[t][b].d);
      for (int r = 0; r < kRows; ++r) {
        float dw;
        const __m256i q = Unpack::load(w[r], b, dw);
        const __m256i q_abs = _mm256_sign_epi8(q, q);
        for (int t = 0; t < T; ++t) {
          const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xt[t][b].q));
          acc[r][t] =
              _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[t]), _mm256_cvtepi32_ps(block_products(q_abs, q, qx)), acc[r][t]);
        }
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < rows_out; ++r)
        y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)] = hsum(acc[r][t]);
  }
};

size_t prepared_bytes(int cols) { return static_cast<size_t>(cols / kQuantBlock) * sizeof(BlockQ8_0); }

void prepare(const float* x, int cols, std::byte* out) {
  quantize_row_q8_0({x, static_cast<size_t>(cols)}, reinterpret_cast<BlockQ8_0*>(out));
}

void multiply_rows(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  switch (w.type) {
    case TensorType::kQ8_0:
      multiply_rows_tiled<kRows, kTokens, QuantTile<UnpackQ8_0>>(w, r0, r1, x, y, y_stride);
      break;
    default:
      multiply_rows_tiled<kRows, kTokens, QuantTile<UnpackQ4_0>>(w, r0, r1, x, y, y_stride);
      break;
  }
}

}  // namespace

const RowsKernel& avx2_rows_kernel() {
  static const RowsKernel k{prepared_bytes, prepare, multiply_rows};
  return k;
}

}  // namespace pagedkv::quant_detail
