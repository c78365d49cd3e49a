// The AVX-512 build of QuantizedMatrix (F, VL, BW, DQ and VNNI; entered only after the run-time
// check in quantized_matrix.cpp), on the weights repacked in panels of 16 rows
// (quantized_panels.h). Every register of weights holds the same columns of 16 rows, and every
// accumulator 16 rows of one token: an activation value (F16/BF16) or 4-byte group (Q8_0/Q4_0) is
// broadcast from memory into the instruction that meets it with 16 rows, and the accumulators are
// stored as they are, with no horizontal sums.
//
// F16 / BF16: per column, the 16 rows' weights widened to f32 once (F16: vcvtph2ps, 2 uops on the
// FMA ports; BF16: a shift or a mask of a column pair, 1 uop), then one FMA per token with the
// broadcast activation. Each row's sum runs over the columns in order, as in the scalar twin
// (fused multiply-adds: one rounding per term instead of two). A tile is P panels x T tokens of
// accumulators: T >= 8 tokens on one panel, fewer tokens on 2 or 4 panels, so that at least 8
// independent FMA chains hide the FMA latency even for a single decode token. vdpbf16ps is not
// used here: on Emerald Rapids (family 6 model 207) it completes one every 2 cycles, 16
// multiply-adds per cycle against the two FMA ports' 32 (BM_PeakMultiplyAdd: 43 against 88 GMAC/s
// on one core), and it needs the activations rounded to BF16 first; where it is the faster
// product (AMD), bf16_pair_kernels_avx512.cpp multiplies BF16 panels instead (Bf16Products). A
// tile of one panel x 16 tokens issues 16 FMAs per column and the widening: with operands in
// cache, F16 tiles run at 88 % of the FMA peak (2 conversion uops per 16 FMAs), BF16 tiles at
// 96 %. A prompt's product runs in blocks of rows and tokens and slices of columns
// (multiply_float_panels), so that weights and activations come from L1 and L2 rather than from
// memory, and widens each F16 panel's slice once for all the block's tokens: its tiles then run
// at the FMA peak in cache (85 against 75 GMAC/s on one core).
//
// Q8_0 / Q4_0: vpdpbusd multiplies unsigned by signed bytes. The panels hold w + 128 (Q8_0) or the
// nibbles w + 8 (Q4_0) as the unsigned operand; the activations are plain signed Q8_0 values, and
// the offset's contribution, -128 (or -8) times the block's sum of activations, is computed per
// token and block in `prepare` and starts the integer accumulator: block sums stay exact, as in the
// scalar twin. Per 32-column block and 16 rows: 8 vpdpbusd per token, then one conversion, one
// multiply by d_w * d_x and one FMA into the token's accumulator, in block order as the scalar twin.
// Tiles of one panel x up to 16 tokens (16 accumulators, the 8 weight registers, the 16 scales);
// a single token on 4 panels, 2-3 tokens on 2 (more independent chains, more streams in flight).
// The chains of 8 tokens run side by side, each vpdpbusd taking the activation's 4 bytes as an
// embedded broadcast (vnni_panel_ops_avx512.h): against one token's chain at a time with a separate
// vpbroadcastd, 32- and 512-token products ran 1.27-1.39x faster (bench_model QuantizedMatmul:
// Q8_0 158 -> 213 GMAC/s at 32 tokens on one core) and batch-16 / -32 decode 1.2-1.3x.
// The activations are quantized 16 lanes at a time, as quantize_row_q8_0 does.
// IQ4_NL (the same blocks as Q4_0) runs Q4_0's tiles with each nibble looked up as kIq4NlValues +
// 128 (vpshufb) and Q8_0's starting value, and adds each block's product unfused, as block_dot
// does: its results equal that twin's bit for bit.
//
// The loops over a tile's panels, tokens and byte groups are unrolled by pragma: at -O2 GCC keeps
// them as loops, with the accumulators and weights in memory instead of registers.
//
// GCC 12 flags the deliberately undefined pass-through operands inside some AVX-512 intrinsics as
// uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "panel_tiles_avx512.h"
#include "quantized_kernels.h"
#include "vnni_panel_ops_avx512.h"

namespace pagedkv::quant_detail {
namespace {

// ---- prepared activations ------------------------------------------------------------------------
// The batch in groups of up to 16 tokens; within a group, the values every step of a tile needs
// lie side by side, so that a tile reads all its tokens through one pointer.
//   F16 / BF16: per column k, the group's T f32 values (T * 4 bytes).
//   Q8_0 / Q4_0: per block, one 48-byte record per token: the 32 signed Q8_0 values, d_x (f32),
//   then -128 * sum(x) and -8 * sum(x) (int32: the starting values of the integer accumulators of
//   Q8_0 / IQ4_NL and Q4_0 weights), 4 bytes of padding.
struct QuantRecord {
  int8_t q[kQuantBlock];
  float d;
  int32_t start_q8, start_q4, unused;
};
static_assert(sizeof(QuantRecord) == 48);

bool quantized(TensorType type) {
  return type == TensorType::kQ8_0 || type == TensorType::kQ4_0 || type == TensorType::kIQ4_NL;
}

// F16 / BF16: the columns a token's prepared values cover. The tiles take two columns a step, so
// an odd count gets a zero column, meeting the panels' zero pad column (F16 panels are padded to
// 64 bytes, BF16 panels hold pairs): adding 0 * 0 changes no sum.
int float_columns(int cols) { return (cols + 1) / 2 * 2; }

size_t token_bytes(TensorType type, int cols) {
  return quantized(type) ? static_cast<size_t>(cols / kQuantBlock) * sizeof(QuantRecord)
                         : static_cast<size_t>(float_columns(cols)) * sizeof(float);
}

size_t prepared_bytes(TensorType type, int cols, int num_tokens) {
  return static_cast<size_t>(num_tokens) * token_bytes(type, cols);
}

// One token's row quantized to Q8_0 as quantize_row_q8_0 does (d = amax / 127, values
// round(x * 127 / amax) with ties to even: the default rounding mode of the conversion, as
// nearbyint there), 16 lanes at a time; equal to it for finite inputs (tested).
void quantize_records(const float* x, int blocks, int tokens, QuantRecord* records) {
  for (int b = 0; b < blocks; ++b) {
    const __m512 lo = _mm512_loadu_ps(x + static_cast<size_t>(b) * kQuantBlock);
    const __m512 hi = _mm512_loadu_ps(x + static_cast<size_t>(b) * kQuantBlock + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    // F16C's conversion rounds to nearest even, as f32_to_f16 (float_convert.h, not included:
    // its inline body would be compiled for AVX-512 here and could be the copy the linker keeps).
    const uint16_t d = _cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q_lo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, id)), q_hi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, id));
    QuantRecord& r = records[static_cast<size_t>(b) * static_cast<size_t>(tokens)];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.q), _mm512_cvtepi32_epi8(q_lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.q + 16), _mm512_cvtepi32_epi8(q_hi));
    r.d = _cvtsh_ss(d);
    // The sum of the codes as stored: for finite inputs the same as of q_lo and q_hi, and for NaN
    // (an overflowing lane conversion) still within 32 * 127, so the products below cannot overflow.
    const __m512i stored_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.q)));
    const __m512i stored_hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.q + 16)));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(stored_lo, stored_hi));
    r.start_q8 = -128 * sum;
    r.start_q4 = -8 * sum;
    r.unused = 0;
  }
}

// Columns k0..k0+15 of 16 tokens' rows (x, x_stride apart) to the group's values of those
// columns (column k0 + j's 16 values at g + 16 j): a 16 x 16 transpose in registers, four stages
// each exchanging one bit of the row index with the same bit of the column index (rows i and
// i + d swap their blocks of d lanes). The element-wise loop wrote a cache line per value: 2 ns a
// value, 3 % of a prompt's prefill.
void transpose_16x16(const float* x, size_t x_stride, float* g) {
  __m512 r[16];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) r[t] = _mm512_loadu_ps(x + static_cast<size_t>(t) * x_stride);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
  for (int d = 8; d >= 1; d /= 2) {
    // Lanes with bit d set take row i + d's lane - d (into row i) or keep row i + d's own lane;
    // the others keep row i's lane (row i) or take row i's lane + d (row i + d).
    const __mmask16 upper = _mm512_test_epi32_mask(lane, _mm512_set1_epi32(d));
    const __m512i to_low = _mm512_mask_add_epi32(lane, upper, lane, _mm512_set1_epi32(16 - d));
    const __m512i to_high = _mm512_mask_blend_epi32(upper, _mm512_add_epi32(lane, _mm512_set1_epi32(d)),
                                                    _mm512_add_epi32(lane, _mm512_set1_epi32(16)));
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      if (i & d) continue;
      const __m512 low = _mm512_permutex2var_ps(r[i], to_low, r[i + d]);
      r[i + d] = _mm512_permutex2var_ps(r[i], to_high, r[i + d]);
      r[i] = low;
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) _mm512_storeu_ps(g + 16 * j, r[j]);
}

// F16 / BF16: a group's tokens (x, x_stride apart) to its values per column (column k's at
// g + k * tokens), with the zero column an odd count is padded with.
void prepare_float_group(const float* x, size_t x_stride, int tokens, int cols, float* g) {
  int k0 = 0;
  if (tokens == 16)
    for (; k0 + 16 <= cols; k0 += 16) transpose_16x16(x + k0, x_stride, g + static_cast<size_t>(k0) * 16);
  for (int t = 0; t < tokens; ++t) {
    const float* xt = x + static_cast<size_t>(t) * x_stride;
    for (int k = k0; k < float_columns(cols); ++k)
      g[static_cast<size_t>(k) * static_cast<size_t>(tokens) + static_cast<size_t>(t)] = k < cols ? xt[k] : 0.0f;
  }
}

void prepare(TensorType type, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out) {
  const int blocks = cols / kQuantBlock;
  for (int t0 = 0; t0 < num_tokens; t0 += kMaxTokens) {
    const int tokens = std::min(kMaxTokens, num_tokens - t0);
    std::byte* group = out + static_cast<size_t>(t0) * token_bytes(type, cols);
    const float* xg = x + static_cast<size_t>(t0) * x_stride;
    if (!quantized(type)) {
      prepare_float_group(xg, x_stride, tokens, cols, reinterpret_cast<float*>(group));
      continue;
    }
    for (int t = 0; t < tokens; ++t)
      quantize_records(xg + static_cast<size_t>(t) * x_stride, blocks, tokens,
                       reinterpret_cast<QuantRecord*>(group) + t);
  }
}

// ---- F16 / BF16 --------------------------------------------------------------------------------

// Widen::load(p, w): the panel's next kColumns columns (kStepBytes bytes at p), 16 rows each, as
// f32 in w[0..kColumns).
// Two columns per step for F16 too (half the loop overhead: 4-5 % at 32 and 512 tokens).
struct WidenF16 {  // vcvtph2ps per column, 2 uops on the FMA ports
  static constexpr int kColumns = 2;
  static constexpr size_t kStepBytes = kPanelRows * 2 * sizeof(uint16_t);
  static void load(const std::byte* p, __m512* w) {
    w[0] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    w[1] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }
};

struct WidenBF16 {  // a pair of columns per 32-bit lane: one shift and one mask, 1 uop a column
  static constexpr int kColumns = 2;
  static constexpr size_t kStepBytes = kPanelRows * 2 * sizeof(uint16_t);
  static void load(const std::byte* p, __m512* w) {
    const __m512i pairs = _mm512_load_si512(p);
    w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));  // the even column: the low half
    w[1] = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

struct WidenF32 {  // F16 columns widened beforehand (multiply_float_panels): plain loads
  static constexpr int kColumns = 2;
  static constexpr size_t kStepBytes = kPanelRows * 2 * sizeof(float);
  static void load(const std::byte* p, __m512* w) {
    w[0] = _mm512_load_ps(p);
    w[1] = _mm512_load_ps(p + 64);
  }
};

// P panels (starting at `panel`, `panel_bytes` apart) x the T tokens of group `x`, over `cols`
// columns; rows_out[p] real rows in panel p. With `resume` the accumulators start from y, where a
// tile over the preceding columns left them: the sums run on in column order, as in one tile.
template <class Widen, int P, int T>
void float_tile(const std::byte* panel, size_t panel_bytes, int cols, const float* x, float* y, size_t y_stride,
                const int* rows_out, bool resume = false, size_t prefetch_ahead = kPrefetchAhead<P>) {
  __m512 acc[P][T];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
      acc[p][t] = resume ? _mm512_maskz_loadu_ps(rows_mask(rows_out[p]), y + static_cast<size_t>(t) * y_stride +
                                                                             static_cast<size_t>(p) * kPanelRows)
                         : _mm512_setzero_ps();
  constexpr int C = Widen::kColumns;
  const int steps = (cols + C - 1) / C;
  for (int s = 0; s < steps; ++s) {
    const std::byte* at = panel + static_cast<size_t>(s) * Widen::kStepBytes;
    const float* xs = x + static_cast<size_t>(s) * C * T;
    if constexpr (Widen::kStepBytes <= 64) {  // (widened columns are in cache already)
      if (s % (64 / Widen::kStepBytes) == 0)  // one 64-byte line per panel at a time
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p)
          _mm_prefetch(reinterpret_cast<const char*>(at + p * panel_bytes + prefetch_ahead), _MM_HINT_T0);
    }
    __m512 w[P][C];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) Widen::load(at + p * panel_bytes, w[p]);
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_set1_ps(xs[c * T + t]);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) acc[p][t] = _mm512_fmadd_ps(w[p][c], xv, acc[p][t]);
      }
  }
  store_tile<P, T>(acc, y, y_stride, rows_out);
}

// ---- Q8_0 / Q4_0 -------------------------------------------------------------------------------

// Register g (0..7) of a panel's block: 16 rows x 4 unsigned bytes, meeting columns 4g..4g+3.
struct UnpackQ8_0 {
  static constexpr TensorType kType = TensorType::kQ8_0;
  static __m512i vector(const std::byte* quants, int g) { return load(quants + g * 64); }
  static int32_t start(const QuantRecord& r) { return r.start_q8; }
};

struct UnpackQ4_0 {
  static constexpr TensorType kType = TensorType::kQ4_0;
  // Register v = g % 4 of the block holds columns 4v.. in its low nibbles, 16 + 4v.. in its high.
  static __m512i vector(const std::byte* quants, int g) {
    const __m512i packed = load(quants + (g % 4) * 64);
    return g < 4 ? nibbles<0>(packed) : nibbles<1>(packed);
  }
  static int32_t start(const QuantRecord& r) { return r.start_q4; }
};

// IQ4_NL: Q4_0's registers, each nibble looked up (vpshufb) as kIq4NlValues + 128, unsigned, so
// the chain starts where Q8_0's does. Its twin is block_dot's (unfused float steps): kFused false.
struct UnpackIQ4_NL {
  static constexpr TensorType kType = TensorType::kIQ4_NL;
  static constexpr bool kFused = false;
  static __m512i vector(const std::byte* quants, int g) {
    return _mm512_shuffle_epi8(iq4_level_table(), UnpackQ4_0::vector(quants, g));
  }
  static int32_t start(const QuantRecord& r) { return r.start_q8; }
};

// Whether a type's block steps are one FMA (Q8_0 / Q4_0, whose twin is the rows build's) or a
// product then a sum, as the block formats' twin block_dot does.
template <class Unpack>
constexpr bool fused() {
  if constexpr (requires { Unpack::kFused; }) return Unpack::kFused;
  else return true;
}

// Tokens whose chains run side by side in a tile of 4 or more: the 8 weight registers and 8 chains.
constexpr int kChainGroup = 8;

// P panels x the T tokens of group `x` (QuantRecords, T per block). Per block and panel, the 8
// registers of weights are loaded once for all T tokens; each token's 8 products are one
// dependent chain, issued register by register across a group of tokens so that consecutive
// vpdpbusd are independent (two chains per token for fewer than 4 tokens, where little else hides
// the latency); the activation's 4 bytes are an embedded broadcast (dpbusd_broadcast).
template <class Unpack, int P, int T>
void quant_tile(const std::byte* panel, const PanelLayout& l, const QuantRecord* x, float* y, size_t y_stride,
                const int* rows_out) {
  const int blocks = l.cols / kQuantBlock;
  constexpr size_t kBlockBytes = PanelLayout::quant_block_bytes(Unpack::kType);
  __m512 acc[P][T];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const QuantRecord* xb = x + static_cast<size_t>(b) * T;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const std::byte* base = panel + static_cast<size_t>(p) * l.panel_bytes;
      const std::byte* quants = base + static_cast<size_t>(b) * kBlockBytes;
#pragma GCC unroll 8
      for (size_t line = 0; line < kBlockBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(quants + line + kPrefetchAhead<P>), _MM_HINT_T0);
      const auto* scales = reinterpret_cast<const __m256i*>(base + l.scales_at) + b;
      if (b % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(scales) + kPrefetchAhead<P> / 8, _MM_HINT_T0);
      __m512i w[8];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) w[g] = Unpack::vector(quants, g);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(scales));
      // acc += (d_w * d_x) * sum, as the scalar twin (fused or not, as its twin is).
      const auto add_block = [&](int t, __m512i isum) __attribute__((always_inline)) {
        const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xb[t].d));
        if constexpr (fused<Unpack>()) acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[p][t]);
        else acc[p][t] = _mm512_add_ps(acc[p][t], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), scale));
      };
      if constexpr (T >= 4) {
        for_token_groups<T, kChainGroup>([&]<int G>(int t0) {
          __m512i chain[G];
#pragma GCC unroll 16
          for (int g = 0; g < G; ++g) chain[g] = _mm512_set1_epi32(Unpack::start(xb[t0 + g]));
          dot_chains<8>(chain, w, xb + t0, 0);
#pragma GCC unroll 16
          for (int g = 0; g < G; ++g) add_block(t0 + g, chain[g]);
        });
      } else {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          __m512i isum = _mm512_set1_epi32(Unpack::start(xb[t])), odd = _mm512_setzero_si512();
#pragma GCC unroll 8
          for (int g = 0; g < 8; g += 2) {
            isum = dpbusd_broadcast(isum, w[g], xb[t].q + 4 * g);
            odd = dpbusd_broadcast(odd, w[g + 1], xb[t].q + 4 * g + 4);
          }
          add_block(t, _mm512_add_epi32(isum, odd));
        }
      }
    }
  }
  store_tile<P, T>(acc, y, y_stride, rows_out);
}

// ---- the driver ----------------------------------------------------------------------------------

template <class Widen>
struct FloatKernel {
  using X = float;
  template <int P, int T>
  static void tile(const std::byte* panel, const PanelLayout& l, const X* x, float* y, size_t y_stride,
                   const int* rows_out) {
    float_tile<Widen, P, T>(panel, l.panel_bytes, l.cols, x, y, y_stride, rows_out);
  }
  // Panels per tile for T tokens: enough independent accumulator chains (>= 8 FMA chains) to hide
  // the FMA latency even for one decode token.
  static int panels_for(int tokens) { return tokens >= 8 ? 1 : tokens >= 4 ? 2 : 4; }
  static constexpr int kTokensOnFourPanels = 3, kTokensOnTwoPanels = 7;
  static size_t token_bytes(const PanelLayout& l) { return quant_detail::token_bytes(l.type, l.cols); }
};

// A prompt (more than one token group) is cut in blocks of kRowBlockPanels panels x up to
// kBlockTokens tokens, and each block's columns in slices of kSliceColumns. Within a slice, each
// panel's part (32 KiB) meets the block's token groups while it is in L1 or L2 (the tiles, or
// F16's widening pass, prefetch the next panel's part), and the block's activations of the slice
// (512 KiB) stay in L2 for all the block's panels; the tiles carry their sums through y (the
// block's outputs, 256 KiB, also in L2) from one slice to the next, so each row's sum still runs
// over the columns in order. An activation byte comes from L3 once per 512 rows, a weight byte
// once per 128 tokens. Whole panels against blocks of 16-48 tokens instead (64 KiB a panel at
// 2,048 columns, 256 KiB at 8,192, with the activations from L3 once per 64 rows) ran ffn_down's
// shape at 70 % of ffn_up's rate. 512 tokens per block, or slices of 256 columns, measured slower.
constexpr int kSliceColumns = 1024;
constexpr int kRowBlockPanels = 32;
constexpr int kBlockTokens = 128;

template <class Widen>
struct FloatSliceKernel {
  template <int P, int T>
  static void tile(const std::byte* panel, size_t panel_bytes, int cols, const float* x, float* y, size_t y_stride,
                   const int* rows_out, bool resume) {
    // Prefetch distance: one panel, the same columns of the next panel.
    float_tile<Widen, P, T>(panel, panel_bytes, cols, x, y, y_stride, rows_out, resume, panel_bytes);
  }
};

template <class Widen>
void multiply_float_panels(const WeightPanels& w, int p0, int p1, const Activations& acts, float* y, size_t y_stride) {
  const PanelLayout& l = w.layout;
  const int n = acts.num_tokens;
  if (n <= kMaxTokens) return group_over_panels<FloatKernel<Widen>>(w, p0, p1, acts, 0, y, y_stride, 4);
  const int cols = float_columns(l.cols);
  const size_t bytes_per_token = token_bytes(l.type, l.cols);
  // F16: each panel's part widened once to f32 for all the block's token groups (vcvtph2ps
  // takes both FMA ports' slots: 2 per 16 FMAs of a tile), where a block has 4 groups or more
  // (for 2 groups the widening pass cost more than it saved: 32 tokens ran at 53 GMAC/s instead
  // of 62).
  constexpr bool kWidenOnce = std::is_same_v<Widen, WidenF16>;
  constexpr int kWidenMinTokens = 3 * kMaxTokens + 1;
  alignas(64) float wide[kWidenOnce ? kSliceColumns * kPanelRows : 1];
  for (int b0 = 0; b0 < n; b0 += kBlockTokens) {
    const int b1 = std::min(n, b0 + kBlockTokens);
    const bool widen = kWidenOnce && b1 - b0 >= kWidenMinTokens;
    for (int r0 = p0; r0 < p1; r0 += kRowBlockPanels) {
      const int r1 = std::min(p1, r0 + kRowBlockPanels);
      for (int c0 = 0; c0 < cols; c0 += kSliceColumns) {
        const int slice = std::min(kSliceColumns, cols - c0);
        for (int p = r0; p < r1; ++p) {
          const int rows_out = std::min(kPanelRows, l.rows - p * kPanelRows);
          const std::byte* panel = w.base + static_cast<size_t>(p) * l.panel_bytes +
                                   static_cast<size_t>(c0 / Widen::kColumns) * Widen::kStepBytes;
          if (widen) {
            const int steps = (slice + 1) / 2;
            for (int st = 0; st < steps; ++st) {
              const std::byte* at = panel + static_cast<size_t>(st) * Widen::kStepBytes;
              _mm_prefetch(reinterpret_cast<const char*>(at + l.panel_bytes), _MM_HINT_T0);  // the next panel's
              __m512 w2[2];
              Widen::load(at, w2);
              _mm512_store_ps(wide + 32 * st, w2[0]);
              _mm512_store_ps(wide + 32 * st + 16, w2[1]);
            }
          }
          for (int t0 = b0; t0 < b1; t0 += kMaxTokens) {
            const int tokens = std::min(kMaxTokens, n - t0);  // a group's values: tokens per column
            const float* x = reinterpret_cast<const float*>(acts.data + static_cast<size_t>(t0) * bytes_per_token) +
                             static_cast<size_t>(c0) * static_cast<size_t>(tokens);
            float* yp = y + static_cast<size_t>(t0) * y_stride + static_cast<size_t>(p) * kPanelRows;
            if (widen)
              Tiles<FloatSliceKernel<WidenF32>, 1, kMaxTokens>::run(tokens, reinterpret_cast<const std::byte*>(wide),
                                                                    l.panel_bytes, slice, x, yp, y_stride, &rows_out,
                                                                    c0 > 0);
            else
              Tiles<FloatSliceKernel<Widen>, 1, kMaxTokens>::run(tokens, panel, l.panel_bytes, slice, x, yp, y_stride,
                                                                 &rows_out, c0 > 0);
          }
        }
      }
    }
  }
}

template <class Unpack>
struct QuantKernel {
  using X = QuantRecord;
  template <int P, int T>
  static void tile(const std::byte* panel, const PanelLayout& l, const X* x, float* y, size_t y_stride,
                   const int* rows_out) {
    quant_tile<Unpack, P, T>(panel, l, x, y, y_stride, rows_out);
  }
  // A few tokens on several panels: more independent chains and more streams in flight.
  static int panels_for(int tokens) { return tokens >= 4 ? 1 : tokens >= 2 ? 2 : 4; }  // >= 4 chains
  static constexpr int kTokensOnFourPanels = 3, kTokensOnTwoPanels = 7;
  static size_t token_bytes(const PanelLayout& l) { return quant_detail::token_bytes(l.type, l.cols); }
};

void multiply_panels(const WeightPanels& w, int p0, int p1, const Activations& x, float* y, size_t y_stride) {
  switch (w.layout.type) {
    case TensorType::kF16:
      multiply_float_panels<WidenF16>(w, p0, p1, x, y, y_stride);
      break;
    case TensorType::kBF16:
      multiply_float_panels<WidenBF16>(w, p0, p1, x, y, y_stride);
      break;
    case TensorType::kQ8_0:
      multiply_panels_with<QuantKernel<UnpackQ8_0>>(w, p0, p1, x, y, y_stride);
      break;
    case TensorType::kIQ4_NL:
      multiply_panels_with<QuantKernel<UnpackIQ4_NL>>(w, p0, p1, x, y, y_stride);
      break;
    default:
      multiply_panels_with<QuantKernel<UnpackQ4_0>>(w, p0, p1, x, y, y_stride);
      break;
  }
}

}  // namespace

const PanelsKernel& avx512_panels_kernel() {
  static const PanelsKernel k{prepared_bytes, prepare, multiply_panels};
  return k;
}

}  // namespace pagedkv::quant_detail
