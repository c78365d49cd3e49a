// The int8 rows' AVX-512 builds (kv_quantize_simd.h); kv_quantize.cpp has the references.
// Values: amax / 127 with the row in one or a few registers (max and the poison sum give the
// same result in any order). Keys: the reference's search with all 16 candidates in one register
// instead of four groups of four, several rows at once (write_kv's heads), the refinement and
// the pick in phases across those rows, the best pair picked without branches, F16C for the f16
// steps and the codes 16 at a time. The same operations in the same order on every lane, so the
// same bits, compiled with -ffp-contract=off (CMakeLists.txt): GCC would otherwise fuse a
// product and a sum into one FMA, rounding once where the reference rounds twice. Where an
// operation differs from the reference's, a comment there says why the result cannot.
// GCC 12's _mm512_min_ps / _mm512_max_ps pass an undefined vector through, which it then flags
// as uninitialized (GCC bug 105593, fixed in 13), as in the other AVX-512 files: silence that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kv_quantize_simd.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv::detail {
namespace {

// f32 -> f16 -> f32 and f32 -> f16 bits: vcvtps2ph rounds to nearest even, as f32_to_f16 does.
float f16_value_f16c(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
uint32_t f16_bits_f16c(float v) {
  return static_cast<uint32_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
uint32_t pack_f16c(float scale, float offset) { return f16_bits_f16c(scale) | (f16_bits_f16c(offset) << 16); }

// The smallest f16 scale >= at_least (> 0): rounded to nearest, one code up if that fell short.
float f16_scale_at_least_f16c(float at_least) {
  uint32_t h = f16_bits_f16c(at_least);
  if (_cvtsh_ss(static_cast<unsigned short>(h)) < at_least) ++h;
  return _cvtsh_ss(static_cast<unsigned short>(h));
}

// kv_quantize.cpp's f16_round and f16_at_least, 16 lanes, with F16C: the reference's Veltkamp
// split (and its 2^-24 grid below 2^-14) gives what vcvtps2ph's round to nearest even gives,
// plus 0 (its subnormal branch makes every zero +0), for every f32 of magnitude up to 65519
// (checked exhaustively, all 2.4e9 of them, when this was written; the values here stay far
// below). Three instructions instead of seven, and f16_at_least's step up is the next f16
// code (+1 on the bits), exactly the reference's rounded + 2^(e - 10) (2^-24 below 2^-14).
__m512 f16_round(__m512 v) {
  const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_add_ps(_mm512_cvtph_ps(h), _mm512_setzero_ps());
}

// For need > 0 (a step).
__m512 f16_at_least(__m512 need) {
  const __m256i h = _mm512_cvtps_ph(need, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 short_of = _mm512_cmp_ps_mask(_mm512_cvtph_ps(h), need, _CMP_LT_OS);
  return _mm512_cvtph_ps(_mm256_mask_add_epi16(h, short_of, h, _mm256_set1_epi16(1)));
}

__mmask16 tail_mask(size_t left) { return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1u); }

// codes = clamp(round_to_even((x - offset) * inverse)) into [-127, 127], 16 at a time, the tail
// masked: the reference's loops (an offset of 0 for the values: x - 0 is x, also for -0).
void store_int8_codes(const float* x, size_t n, __m512 offset, __m512 inverse, int8_t* codes) {
  const __m512 magic = _mm512_set1_ps(12582912.0f), top = _mm512_set1_ps(kInt8CodeMax),
               bottom = _mm512_set1_ps(-kInt8CodeMax);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 scaled = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), offset), inverse);
    const __m512 code = _mm512_max_ps(bottom, _mm512_min_ps(top, _mm512_sub_ps(_mm512_add_ps(scaled, magic), magic)));
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, m, _mm512_cvtps_epi32(code));
  }
}

KeyRowRange key_row_midpoint(const float* x, size_t n) {
  return detail::key_row_midpoint(x, n, [](float v) { return f16_value_f16c(v); });
}

// The reference's search_key_steps for `candidates` (4..16) steps, lane l the candidate
// min(l, candidates - 1), so a repeated lane never wins (strict <, first in order), for R plain
// rows of n elements at once (x[r], range[r]): their chains of divisions and sums interleave.
// Then each row's codes and packed pair; a row where no pair's error is below infinity keeps
// the midpoint and the smallest f16 step >= half / 127, as the reference does.
template <int R>
void search_and_store(const float* const* x, const KeyRowRange* range, size_t n, size_t candidates,
                      int8_t* const* codes, uint32_t* packed) {
  const __m512 top_codes = _mm512_load_ps(kKeyTopCodes.codes[candidates]);
  __m512 mid[R], scale[R], inverse[R];
  __m512 squared_error[R], yc[R], cc[R], cs[R], y_squares[R];
  // y = x - mid and y², 16 elements per operation (every lane of the loop below would compute
  // the same); Σ y² in the reference's order, one element after another.
  alignas(64) float centred[R][32], centred_squares[R][32];
  static_assert(kInt8FitElementBudget / 4 <= 32, "searched rows (4 candidates or more) fit the buffers");
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    mid[r] = _mm512_set1_ps(range[r].mid);
    scale[r] = f16_at_least(_mm512_div_ps(_mm512_set1_ps(range[r].half), top_codes));
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    inverse[r] = _mm512_div_ps(_mm512_set1_ps(1.0f), scale[r]);
    squared_error[r] = yc[r] = cc[r] = cs[r] = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
      const __m512 y = _mm512_sub_ps(_mm512_maskz_loadu_ps(tail_mask(n - i), x[r] + i), mid[r]);
      _mm512_store_ps(centred[r] + i, y);
      _mm512_store_ps(centred_squares[r] + i, _mm512_mul_ps(y, y));
    }
  }
  float sums[R] = {};
  for (size_t i = 0; i < n; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) sums[r] += centred_squares[r][i];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y_squares[r] = _mm512_set1_ps(sums[r]);
  // fit_lanes<G> with G = 1 over 16 lanes, two steps shorter:
  // - round_to_even as one vrndscaleps: the same integer as adding and subtracting 1.5 * 2^23
  //   for |y / step| <= 2^22 (here <= 128); it keeps the sign of a zero where that gives +0,
  //   which changes no sum below (every sum starts at +0, and +0 plus -0 is +0).
  // - no clamp to [-127, 127], which never acts here: |y| <= half, and step >= half / top
  //   rounded (f16_at_least rounds up; where half / top is an f32 subnormal, step >= 2^-24 is
  //   far above it), so |y * (1 / step)| <= top (1 + 2^-24)^3 / (1 - 2^-24) < 127.5 for top <= 127.
  for (size_t i = 0; i < n; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 y = _mm512_set1_ps(centred[r][i]);
      const __m512 code =
          _mm512_roundscale_ps(_mm512_mul_ps(y, inverse[r]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 diff = _mm512_sub_ps(y, _mm512_mul_ps(scale[r], code));
      squared_error[r] = _mm512_add_ps(squared_error[r], _mm512_mul_ps(diff, diff));
      yc[r] = _mm512_add_ps(yc[r], _mm512_mul_ps(y, code));
      cc[r] = _mm512_add_ps(cc[r], _mm512_mul_ps(code, code));
      cs[r] = _mm512_add_ps(cs[r], code);
    }
  }
  // The refined pairs, as the reference's search_key_steps. Dividing by n is multiplying by
  // 1 / n where n is a power of two (both are the exact quotient, rounded once): one division
  // fewer on the way to the pair for 8- and 16-element rows.
  const __m512 count = _mm512_set1_ps(static_cast<float>(n)), two = _mm512_set1_ps(2.0f);
  const bool power_of_two = (n & (n - 1)) == 0;
  const __m512 inverse_count = _mm512_set1_ps(1.0f / static_cast<float>(n));
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  // In phases, each for all R rows before the next: the rows' chains sit side by side in the
  // instruction stream, so they overlap (one row after another, they mostly wait).
  __m512 offset[R], refined[R], refined_inverse[R], own[R], fit[R], least[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512 y_sum = _mm512_set1_ps(range[r].sum - static_cast<float>(n) * range[r].mid);
    const __m512 det = _mm512_sub_ps(_mm512_mul_ps(count, cc[r]), _mm512_mul_ps(cs[r], cs[r]));
    const __m512 fitted_scale =
        _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(count, yc[r]), _mm512_mul_ps(cs[r], y_sum)), det);
    const __mmask16 valid = _mm512_cmp_ps_mask(det, _mm512_setzero_ps(), _CMP_GT_OS) &
                            _mm512_cmp_ps_mask(fitted_scale, _mm512_setzero_ps(), _CMP_GT_OS);
    const __m512 spare = _mm512_sub_ps(y_sum, _mm512_mul_ps(fitted_scale, cs[r]));
    const __m512 shift_fit = power_of_two ? _mm512_mul_ps(spare, inverse_count) : _mm512_div_ps(spare, count);
    const __m512 fitted_offset = f16_round(_mm512_add_ps(mid[r], shift_fit));
    offset[r] = _mm512_mask_blend_ps(valid, mid[r], fitted_offset);
    const __m512 reach = _mm512_max_ps(_mm512_sub_ps(_mm512_set1_ps(range[r].hi), offset[r]),
                                       _mm512_sub_ps(offset[r], _mm512_set1_ps(range[r].lo)));
    refined[r] = f16_at_least(_mm512_max_ps(_mm512_maskz_mov_ps(valid, fitted_scale),
                                            _mm512_div_ps(reach, _mm512_set1_ps(kInt8CodeMax + 0.5f))));
    const __m512 shift = _mm512_sub_ps(offset[r], mid[r]);
    __m512 e = _mm512_sub_ps(
        y_squares[r], _mm512_mul_ps(two, _mm512_add_ps(_mm512_mul_ps(shift, y_sum), _mm512_mul_ps(refined[r], yc[r]))));
    e = _mm512_add_ps(e, _mm512_mul_ps(shift, _mm512_add_ps(_mm512_mul_ps(count, shift),
                                                            _mm512_mul_ps(two, _mm512_mul_ps(refined[r], cs[r])))));
    e = _mm512_add_ps(e, _mm512_mul_ps(_mm512_mul_ps(refined[r], refined[r]), cc[r]));
    refined_inverse[r] = _mm512_div_ps(_mm512_set1_ps(1.0f), refined[r]);  // beside the selection below
    // NaN never wins below: as infinity, which never does either.
    own[r] =
        _mm512_mask_mov_ps(inf, _mm512_cmp_ps_mask(squared_error[r], squared_error[r], _CMP_ORD_Q), squared_error[r]);
    fit[r] = _mm512_mask_mov_ps(inf, _mm512_cmp_ps_mask(e, e, _CMP_ORD_Q), e);
  }
  // The reference walks candidate 0's own error, its refined error, candidate 1's, ... and keeps
  // a value only if strictly below the best so far (infinity at first): the first of the
  // smallest, NaN and infinity never. So: the smallest finite value (in every lane: butterflies
  // of min), then the first lane holding it, its own error before its refined one; no branch on
  // which.
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) least[r] = _mm512_min_ps(own[r], fit[r]);
  for (int d = 8; d >= 1; d /= 2) {
    const __m512i partner = _mm512_xor_si512(lane, _mm512_set1_epi32(d));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) least[r] = _mm512_min_ps(least[r], _mm512_permutexvar_ps(partner, least[r]));
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m512 chosen_scale, chosen_offset, chosen_inverse;
    if (_mm512_cmp_ps_mask(least[r], inf, _CMP_LT_OQ) != 0) {
      const __mmask16 own_hits = _mm512_cmp_ps_mask(own[r], least[r], _CMP_EQ_OQ);
      const __mmask16 fit_hits = _mm512_cmp_ps_mask(fit[r], least[r], _CMP_EQ_OQ);
      const __m512i first = _mm512_set1_epi32(__builtin_ctz(static_cast<unsigned>(own_hits | fit_hits)));
      chosen_scale = _mm512_permutexvar_ps(first, _mm512_mask_blend_ps(own_hits, refined[r], scale[r]));
      chosen_offset = _mm512_permutexvar_ps(first, _mm512_mask_blend_ps(own_hits, offset[r], mid[r]));
      chosen_inverse = _mm512_permutexvar_ps(first, _mm512_mask_blend_ps(own_hits, refined_inverse[r], inverse[r]));
    } else {
      const float step = f16_scale_at_least_f16c(range[r].half / kInt8CodeMax);
      chosen_scale = _mm512_set1_ps(step);
      chosen_offset = mid[r];
      chosen_inverse = _mm512_set1_ps(1.0f / step);
    }
    store_int8_codes(x[r], n, chosen_offset, chosen_inverse, codes[r]);
    packed[r] = pack_f16c(_mm512_cvtss_f32(chosen_scale), _mm512_cvtss_f32(chosen_offset));
  }
}

// key_row_midpoint for rows the search skips (n > 32): their sum is not needed, and min and max
// are the same whatever the order but for which zero they keep, which only an all-zero row
// shows (its offset's sign; elsewhere a zero end adds +-0 to a nonzero midpoint or half) and
// which then goes to the reference's order. 16 lanes, the tail masked out.
KeyRowRange key_row_midpoint_unsearched(const float* x, size_t n) {
  __m512 lane_lo = _mm512_set1_ps(__builtin_inff()), lane_hi = _mm512_set1_ps(-__builtin_inff());
  __m512 lane_poison = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    lane_lo = _mm512_mask_min_ps(lane_lo, m, lane_lo, v);
    lane_hi = _mm512_mask_max_ps(lane_hi, m, lane_hi, v);
    lane_poison = _mm512_add_ps(lane_poison, _mm512_mul_ps(v, _mm512_setzero_ps()));
  }
  KeyRowRange r{};
  r.lo = _mm512_reduce_min_ps(lane_lo);
  r.hi = _mm512_reduce_max_ps(lane_hi);
  if (r.lo == 0.0f && r.hi == 0.0f) return key_row_midpoint(x, n);
  if (!(_mm512_reduce_add_ps(lane_poison) == 0.0f) || !(key_row_max(r.hi, -r.lo) <= kKeyF16Max)) return r;  // kNaN
  key_row_set_midpoint(r, [](float v) { return f16_value_f16c(v); });
  return r;
}

// One row, any n >= 1: the reference's early answers for NaN, out-of-range and constant rows,
// the midpoint alone where the search takes one candidate, else search_and_store<1>.
uint32_t quantize_one_key_row(const float* x, size_t n, int8_t* codes) {
  const size_t candidates = int8_key_fit_candidates(n);
  const KeyRowRange range = candidates > 1 ? key_row_midpoint(x, n) : key_row_midpoint_unsearched(x, n);
  if (range.kind != KeyRowRange::kPlain) {
    std::memset(codes, 0, n);
    return range.kind == KeyRowRange::kConstant ? pack_f16c(0.0f, range.mid) : kNaNKeyScaleOffset;
  }
  uint32_t packed;
  if (candidates > 1) {
    search_and_store<1>(&x, &range, n, candidates, &codes, &packed);
    return packed;
  }
  const float step = f16_scale_at_least_f16c(range.half / kInt8CodeMax);
  store_int8_codes(x, n, _mm512_set1_ps(range.mid), _mm512_set1_ps(1.0f / step), codes);
  return pack_f16c(step, range.mid);
}

}  // namespace

float quantize_value_row_int8_avx512(const float* x, size_t n, int8_t* codes) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 lane_max = _mm512_setzero_ps(), lane_poison = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);  // masked lanes: 0, harmless
    lane_max = _mm512_max_ps(lane_max, _mm512_and_ps(v, abs_mask));
    lane_poison = _mm512_add_ps(lane_poison, _mm512_mul_ps(v, _mm512_setzero_ps()));
  }
  // Any NaN or infinity makes the poison sum NaN; the reference's amax is then NaN.
  const float poison = _mm512_reduce_add_ps(lane_poison);
  const float amax = _mm512_reduce_max_ps(lane_max);
  if (!(poison == 0.0f) || !(amax > 0)) {
    std::memset(codes, 0, n);
    return poison == 0.0f ? 0.0f : __builtin_nanf("");
  }
  store_int8_codes(x, n, _mm512_setzero_ps(), _mm512_set1_ps(kInt8CodeMax / amax), codes);
  return amax / kInt8CodeMax;
}

uint32_t quantize_key_row_int8_avx512(const float* x, size_t n, int8_t* codes) {
  return quantize_one_key_row(x, n, codes);
}

void quantize_key_rows_int8_avx512(const float* x, size_t rows, size_t n, int8_t* codes, uint32_t* packed) {
  constexpr int kRows = 4;  // rows searched together
  quantize_key_rows_grouped<kRows>(x, rows, n, codes, packed, key_row_midpoint, search_and_store<kRows>,
                                   quantize_one_key_row);
}

}  // namespace pagedkv::detail
