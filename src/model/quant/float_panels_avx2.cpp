// The AVX2 build (with FMA and F16C) of QuantizedMatrix's F16 / BF16 products, on the weights
// repacked in panels of 16 rows (quantized_panels.h): the AVX-512 build's panels, each column's 16
// rows read as two 8-row halves. It runs where AVX-512 does not (AMD Zen 2 / Zen 3, Intel client
// cores), where the row-by-row build (quantized_kernels_avx2.cpp) widened every weight for only 2
// tokens and summed 8 columns per lane: a 512-token prompt ran at half the FMA peak.
//
// Lanes are rows: per column, the rows' weights are widened to f32 once (F16: vcvtph2ps of 8
// values; BF16: a shift or a mask of a column pair) and meet each token's activation, broadcast,
// in one FMA. Each row's sum runs over the columns in order, one FMA per column, as in the AVX-512
// build: the two builds give the same results bit for bit, and a token the same result alone or in
// any batch. A tile is P panels x T tokens of accumulators (2 P T ymm registers, at most 12 of the
// 16, so that with the weights and the broadcasts nothing spills): groups of 3 tokens or 2 on 2
// panels, 1 token on 4, so that at least 8 independent FMA chains hide the FMA latency. A prompt
// runs in blocks of panels x tokens and slices of columns, as the AVX-512 build's
// multiply_float_panels, each pair of panels' slice widened to f32 once for all the block's tokens.
// On a Zen 3 core (BM_QuantizedMatmul, 8192 x 2048, 512 tokens) F16 runs at 38.7 GMAC/s and BF16
// at 39.6, 77-78 % of the core's FMA peak (50.5); widening in the tiles instead ran them at 74 %
// and 56 % (the conversions take FMA-port slots).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "lanes_avx2.h"
#include "quantized_kernels.h"
#include "quantized_panels.h"

namespace pagedkv::quant_detail {
namespace {

// ---- prepared activations ------------------------------------------------------------------------
// The batch in groups of up to kGroupTokens tokens; within a group, per column k, the group's
// values side by side (a tile reads all its tokens through one pointer). An odd column count gets
// a zero column, meeting the panels' zero pad column (F16 panels are padded to 64 bytes, BF16
// panels hold pairs): adding 0 * 0 changes no sum.
constexpr int kGroupTokens = 3;

int float_columns(int cols) { return (cols + 1) / 2 * 2; }

size_t token_bytes(int cols) { return static_cast<size_t>(float_columns(cols)) * sizeof(float); }

size_t prepared_bytes(TensorType, int cols, int num_tokens) {
  return static_cast<size_t>(num_tokens) * token_bytes(cols);
}

void prepare(TensorType, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out) {
  const int columns = float_columns(cols);
  for (int t0 = 0; t0 < num_tokens; t0 += kGroupTokens) {
    const int tokens = std::min(kGroupTokens, num_tokens - t0);
    float* g = reinterpret_cast<float*>(out + static_cast<size_t>(t0) * token_bytes(cols));
    const float* xg = x + static_cast<size_t>(t0) * x_stride;
    for (int k = 0; k < columns; ++k)
      for (int t = 0; t < tokens; ++t)
        *g++ = k < cols ? xg[static_cast<size_t>(t) * x_stride + static_cast<size_t>(k)] : 0.0f;
  }
}

// ---- widening ------------------------------------------------------------------------------------

// Widen::column(p, h, c): half h (rows 8h..8h+7) of column c (0 or 1) of the panel's next two
// columns (64 bytes at p), as f32.
struct WidenF16 {  // column k: 16 consecutive F16 values, rows 0-7 then 8-15
  static constexpr size_t kStepBytes = 64;
  static __m256 column(const std::byte* p, int h, int c) {
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p + 32 * c + 16 * h)));
  }
};

struct WidenBF16 {  // a column pair per 32-bit lane, the first column in the low half
  static constexpr size_t kStepBytes = 64;
  static __m256 column(const std::byte* p, int h, int c) {
    const __m256i pairs = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
    return _mm256_castsi256_ps(c == 0 ? _mm256_slli_epi32(pairs, 16)
                                      : _mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

struct WidenF32 {  // a prompt's panel slice widened beforehand (multiply_with): plain loads
  static constexpr size_t kStepBytes = 128;
  static __m256 column(const std::byte* p, int h, int c) {
    return _mm256_load_ps(reinterpret_cast<const float*>(p + 64 * c + 32 * h));
  }
};

// ---- tiles ---------------------------------------------------------------------------------------

// P panels (`panel_bytes` apart) x the T tokens of group `x` (T values per column), over `cols`
// columns (even); rows_out[p] real rows in panel p. With `resume` the accumulators start from y,
// where a tile over the preceding columns left them: each sum runs on in column order.
template <class Widen, int P, int T>
void tile(const std::byte* panel, size_t panel_bytes, int cols, const float* x, float* y, size_t y_stride,
          const int* rows_out, bool resume, size_t prefetch_ahead) {
  __m256 acc[P][2][T];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        acc[p][h][t] = resume ? load_rows(y + static_cast<size_t>(t) * y_stride + static_cast<size_t>(16 * p + 8 * h),
                                          rows_out[p] - 8 * h)
                              : _mm256_setzero_ps();
  const int steps = cols / 2;
  for (int s = 0; s < steps; ++s) {
    const std::byte* at = panel + static_cast<size_t>(s) * Widen::kStepBytes;
    const float* xs = x + static_cast<size_t>(s) * 2 * T;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p)
      _mm_prefetch(reinterpret_cast<const char*>(at + p * panel_bytes + prefetch_ahead), _MM_HINT_T0);
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      if constexpr (2 * P >= T) {
        // Few tokens: the broadcasts stay in registers, each weight vector is used as it is widened.
        __m256 xv[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) xv[t] = _mm256_broadcast_ss(xs + c * T + t);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m256 w = Widen::column(at + p * panel_bytes, h, c);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) acc[p][h][t] = _mm256_fmadd_ps(w, xv[t], acc[p][h][t]);
          }
      } else {
        // Many tokens: the column's widened weights stay in registers, one broadcast at a time.
        __m256 w[P][2];
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) w[p][h] = Widen::column(at + p * panel_bytes, h, c);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256 xv = _mm256_broadcast_ss(xs + c * T + t);
#pragma GCC unroll 4
          for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) acc[p][h][t] = _mm256_fmadd_ps(w[p][h], xv, acc[p][h][t]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        store_rows(y + static_cast<size_t>(t) * y_stride + static_cast<size_t>(16 * p + 8 * h), rows_out[p] - 8 * h,
                   acc[p][h][t]);
}

// Prefetch distances: one token streams its panels from memory (a few KiB ahead of each); a
// prompt's slices fetch the same columns of the next panel.
template <int P>
constexpr size_t kStreamAhead = P == 1 ? 6144 : 2048;

// A group of `tokens` (1..kGroupTokens) on the panels [p0, p1) of a matrix of `rows` rows, panel p
// at first + (p - p0) * panel_bytes: the tile shape for its size.
template <class Widen>
void run_group(int tokens, const std::byte* first, size_t panel_bytes, int rows, int p0, int p1, int cols,
               const float* x, float* y, size_t y_stride, bool resume, size_t ahead_override) {
  const auto run = [&]<int P, int T>(int p) {
    int rows_out[P];
    for (int i = 0; i < P; ++i) rows_out[i] = std::clamp(rows - (p + i) * kPanelRows, 0, kPanelRows);
    tile<Widen, P, T>(first + static_cast<size_t>(p - p0) * panel_bytes, panel_bytes, cols, x,
                      y + static_cast<size_t>(p) * kPanelRows, y_stride, rows_out, resume,
                      ahead_override != 0 ? ahead_override : kStreamAhead<P>);
  };
  const auto over_panels = [&]<int T>() {
    constexpr int kPanels = T >= 2 ? 2 : 4;  // 3 or 2 tokens: 2 panels a tile; 1 token: 4 (the rest one by one)
    int p = p0;
    for (; p + kPanels <= p1; p += kPanels) run.template operator()<kPanels, T>(p);
    for (; p < p1; ++p) run.template operator()<1, T>(p);
  };
  static_assert(kGroupTokens == 3);
  if (tokens == 1) return over_panels.template operator()<1>();
  if (tokens == 2) return over_panels.template operator()<2>();
  over_panels.template operator()<3>();
}

// A prompt (more than one token group) is cut in blocks of kRowBlockPanels panels x kBlockTokens
// tokens, and each block's columns in slices of kSliceColumns. Where a block has kWidenMinTokens
// or more, each pair of panels' slice is widened to f32 once (128 KiB) and meets the block's token
// groups from L2; the block's activations of the slice (384 KiB) stay in L2 (512 KiB on a Zen 3
// core) for the block's panels; the tiles carry their sums through y from one slice to the next.
// Blocks of 48 tokens ran 7 % slower (the widening pass, from memory, counts twice as often);
// slices of 256 or 512 columns 20 % and 3 % slower.
constexpr int kSliceColumns = 1024;
constexpr int kRowBlockPanels = 32;
constexpr int kBlockTokens = 32 * kGroupTokens;
constexpr int kWidenMinTokens = 4 * kGroupTokens + 1;

constexpr int kPair = 2;  // panels per tile: a group's 3 tokens on 2 panels
constexpr size_t kWideBytes = kSliceColumns * kPanelRows * sizeof(float);

template <class Widen>
void multiply_with(const WeightPanels& w, int p0, int p1, const Activations& acts, float* y, size_t y_stride) {
  const PanelLayout& l = w.layout;
  const int n = acts.num_tokens;
  const int cols = float_columns(l.cols);
  const auto* x = reinterpret_cast<const float*>(acts.data);
  const auto panel_at = [&](int p) { return w.base + static_cast<size_t>(p) * l.panel_bytes; };
  if (n <= kGroupTokens)
    return run_group<Widen>(n, panel_at(p0), l.panel_bytes, l.rows, p0, p1, cols, x, y, y_stride, false, 0);
  alignas(64) float wide[kPair * kSliceColumns * kPanelRows];  // 128 KiB of stack, as the AVX-512 build's 64
  for (int b0 = 0; b0 < n; b0 += kBlockTokens) {
    const int b1 = std::min(n, b0 + kBlockTokens);
    const bool widen = b1 - b0 >= kWidenMinTokens;
    for (int r0 = p0; r0 < p1; r0 += kRowBlockPanels) {
      const int r1 = std::min(p1, r0 + kRowBlockPanels);
      for (int c0 = 0; c0 < cols; c0 += kSliceColumns) {
        const int slice = std::min(kSliceColumns, cols - c0);
        for (int p = r0; p < r1; p += kPair) {
          const int pe = std::min(r1, p + kPair);
          const std::byte* part = panel_at(p) + static_cast<size_t>(c0 / 2) * Widen::kStepBytes;
          if (widen) {
            for (int q = p; q < pe; ++q) {
              const std::byte* from = part + static_cast<size_t>(q - p) * l.panel_bytes;
              float* to = wide + static_cast<size_t>(q - p) * kSliceColumns * kPanelRows;
              for (int st = 0; st < slice / 2; ++st) {
                const std::byte* at = from + static_cast<size_t>(st) * Widen::kStepBytes;
                _mm_prefetch(reinterpret_cast<const char*>(at + kPair * l.panel_bytes),
                             _MM_HINT_T0);  // the next pair's
#pragma GCC unroll 2
                for (int c = 0; c < 2; ++c)
#pragma GCC unroll 2
                  for (int h = 0; h < 2; ++h) _mm256_store_ps(to + 32 * st + 16 * c + 8 * h, Widen::column(at, h, c));
              }
            }
          }
          for (int t0 = b0; t0 < b1; t0 += kGroupTokens) {
            const int tokens = std::min(kGroupTokens, n - t0);
            const float* xg = x + static_cast<size_t>(t0) * static_cast<size_t>(cols) +
                              static_cast<size_t>(c0) * static_cast<size_t>(tokens);
            float* yg = y + static_cast<size_t>(t0) * y_stride;
            if (widen)
              run_group<WidenF32>(tokens, reinterpret_cast<const std::byte*>(wide), kWideBytes, l.rows, p, pe, slice,
                                  xg, yg, y_stride, c0 > 0, 64);
            else
              run_group<Widen>(tokens, part, l.panel_bytes, l.rows, p, pe, slice, xg, yg, y_stride, c0 > 0,
                               kPair * l.panel_bytes);
          }
        }
      }
    }
  }
}

void multiply_panels(const WeightPanels& w, int p0, int p1, const Activations& x, float* y, size_t y_stride) {
  if (w.layout.type == TensorType::kBF16) return multiply_with<WidenBF16>(w, p0, p1, x, y, y_stride);
  multiply_with<WidenF16>(w, p0, p1, x, y, y_stride);
}

}  // namespace

const PanelsKernel& avx2_float_panels_kernel() {
  static const PanelsKernel k{prepared_bytes, prepare, multiply_panels};
  return k;
}

}  // namespace pagedkv::quant_detail
