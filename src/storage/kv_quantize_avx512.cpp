// The int8 rows' AVX-512 builds (kv_quantize_simd.h). Values: amax / 127 with the row in one or
// a few registers (max and the poison sum give the same result in any order, so the lanes may
// split the row differently from the reference's four). Keys: quantize_key_row_int8's SSE2
// reference search (kv_quantize.cpp) with all
// 16 candidates in one register instead of four groups of four, the best pair picked with two
// compares instead of 32 branches, the f16 conversions in F16C instructions and the codes 16 at a
// time. The same operations in the same order on every lane, so the same bits: compiled with
// -ffp-contract=off (CMakeLists.txt), since GCC would otherwise fuse a product and a sum into one
// FMA, rounding once where the reference rounds twice. The search's scalar steps (the midpoint,
// the step from 127 down to 112) are the reference's expressions, as its own.
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

// kv_quantize.cpp's f16_round and f16_at_least, 16 lanes: Veltkamp's split for normal values,
// multiples of 2^-24 below 2^-14; then one f16 step up where the rounding fell short.
__m512 f16_round(__m512 v) {
  const __m512 c = _mm512_mul_ps(v, _mm512_set1_ps(8193.0f));
  const __m512 normal = _mm512_sub_ps(c, _mm512_sub_ps(c, v));
  const __m512 subnormal = _mm512_sub_ps(_mm512_add_ps(v, _mm512_set1_ps(0.75f)), _mm512_set1_ps(0.75f));
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
  const __mmask16 tiny = _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(0x1p-14f), _CMP_LT_OS);
  return _mm512_mask_blend_ps(tiny, normal, subnormal);
}

__m512 f16_at_least(__m512 need) {
  const __m512 rounded = f16_round(need);
  const __m512 power = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rounded), _mm512_set1_epi32(0x7f800000)));
  const __m512 step = _mm512_max_ps(_mm512_mul_ps(power, _mm512_set1_ps(0x1p-10f)), _mm512_set1_ps(0x1p-24f));
  const __mmask16 short_of = _mm512_cmp_ps_mask(rounded, need, _CMP_LT_OS);
  return _mm512_add_ps(rounded, _mm512_maskz_mov_ps(short_of, step));
}

// The pair the search keeps, each in every lane (what the codes' loop needs), and the scale's
// reciprocal, 1 / scale as the reference computes it after the search.
struct ChosenPair {
  __m512 scale, offset, inverse;
};

// The reference's search_key_steps for `candidates` (4..16) steps, lane l the candidate
// min(l, candidates - 1), so a repeated lane never wins (strict <, first in order). Returns
// false where no pair's error is below infinity (the reference then keeps half / 127).
bool search_key_steps16(const float* x, size_t n, size_t candidates, float lo, float hi, float mid_offset, float half,
                        float x_sum, ChosenPair& chosen) {
  const __m512 mid = _mm512_set1_ps(mid_offset);
  const float top_step = (kInt8CodeMax - kInt8FitLowestTopCode) / static_cast<float>(candidates - 1);
  const __m512 lane = _mm512_min_ps(
      _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_ps(static_cast<float>(candidates - 1)));
  const __m512 top_codes = _mm512_sub_ps(_mm512_set1_ps(kInt8CodeMax), _mm512_mul_ps(_mm512_set1_ps(top_step), lane));
  const __m512 scale = f16_at_least(_mm512_div_ps(_mm512_set1_ps(half), top_codes));
  const __m512 inverse = _mm512_div_ps(_mm512_set1_ps(1.0f), scale);

  // fit_lanes<G> with G = 1 over 16 lanes, and the reference's scalar Σ (x - mid)², summed in
  // the same order on every lane (all lanes equal).
  const __m512 magic = _mm512_set1_ps(12582912.0f), top = _mm512_set1_ps(kInt8CodeMax), bottom = _mm512_set1_ps(-kInt8CodeMax);
  __m512 squared_error = _mm512_setzero_ps(), yc = _mm512_setzero_ps(), cc = _mm512_setzero_ps(), cs = _mm512_setzero_ps();
  __m512 y_squares = _mm512_setzero_ps();
  for (size_t i = 0; i < n; ++i) {
    const __m512 centred = _mm512_sub_ps(_mm512_set1_ps(x[i]), mid);
    const __m512 rounded = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(centred, inverse), magic), magic);
    const __m512 code = _mm512_max_ps(bottom, _mm512_min_ps(top, rounded));
    const __m512 diff = _mm512_sub_ps(centred, _mm512_mul_ps(scale, code));
    squared_error = _mm512_add_ps(squared_error, _mm512_mul_ps(diff, diff));
    yc = _mm512_add_ps(yc, _mm512_mul_ps(centred, code));
    cc = _mm512_add_ps(cc, _mm512_mul_ps(code, code));
    cs = _mm512_add_ps(cs, code);
    y_squares = _mm512_add_ps(y_squares, _mm512_mul_ps(centred, centred));
  }

  // The refined pairs, as the reference's search_key_steps. Dividing by n is multiplying by
  // 1 / n where n is a power of two (both are the exact quotient, rounded once): one division
  // fewer on the way to the pair for 8- and 16-element rows.
  const __m512 count = _mm512_set1_ps(static_cast<float>(n)), two = _mm512_set1_ps(2.0f);
  const __m512 y_sum = _mm512_set1_ps(x_sum - static_cast<float>(n) * mid_offset);
  const __m512 det = _mm512_sub_ps(_mm512_mul_ps(count, cc), _mm512_mul_ps(cs, cs));
  const __m512 fitted_scale = _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(count, yc), _mm512_mul_ps(cs, y_sum)), det);
  const __mmask16 valid = _mm512_cmp_ps_mask(det, _mm512_setzero_ps(), _CMP_GT_OS) &
                          _mm512_cmp_ps_mask(fitted_scale, _mm512_setzero_ps(), _CMP_GT_OS);
  const __m512 spare = _mm512_sub_ps(y_sum, _mm512_mul_ps(fitted_scale, cs));
  const __m512 shift_fit = (n & (n - 1)) == 0 ? _mm512_mul_ps(spare, _mm512_set1_ps(1.0f / static_cast<float>(n)))
                                              : _mm512_div_ps(spare, count);
  const __m512 fitted_offset = f16_round(_mm512_add_ps(mid, shift_fit));
  const __m512 offset = _mm512_mask_blend_ps(valid, mid, fitted_offset);
  const __m512 reach = _mm512_max_ps(_mm512_sub_ps(_mm512_set1_ps(hi), offset), _mm512_sub_ps(offset, _mm512_set1_ps(lo)));
  const __m512 refined = f16_at_least(
      _mm512_max_ps(_mm512_maskz_mov_ps(valid, fitted_scale), _mm512_div_ps(reach, _mm512_set1_ps(kInt8CodeMax + 0.5f))));
  const __m512 shift = _mm512_sub_ps(offset, mid);
  __m512 e = _mm512_sub_ps(y_squares, _mm512_mul_ps(two, _mm512_add_ps(_mm512_mul_ps(shift, y_sum), _mm512_mul_ps(refined, yc))));
  e = _mm512_add_ps(e, _mm512_mul_ps(shift, _mm512_add_ps(_mm512_mul_ps(count, shift), _mm512_mul_ps(two, _mm512_mul_ps(refined, cs)))));
  e = _mm512_add_ps(e, _mm512_mul_ps(_mm512_mul_ps(refined, refined), cc));
  const __m512 refined_inverse = _mm512_div_ps(_mm512_set1_ps(1.0f), refined);  // beside the selection below

  // The reference walks candidate 0's own error, its refined error, candidate 1's, ... and keeps
  // a value only if strictly below the best so far (infinity at first): the first of the
  // smallest, NaN and infinity never. So: the smallest finite value, then the first lane holding
  // it, its own error before its refined one; no branch on which.
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  const __m512 own = _mm512_mask_mov_ps(inf, _mm512_cmp_ps_mask(squared_error, squared_error, _CMP_ORD_Q), squared_error);
  const __m512 fit = _mm512_mask_mov_ps(inf, _mm512_cmp_ps_mask(e, e, _CMP_ORD_Q), e);
  const float smallest = _mm512_reduce_min_ps(_mm512_min_ps(own, fit));
  if (!(smallest < __builtin_inff())) return false;
  const __m512 least = _mm512_set1_ps(smallest);
  const __mmask16 own_hits = _mm512_cmp_ps_mask(own, least, _CMP_EQ_OQ);
  const __mmask16 fit_hits = _mm512_cmp_ps_mask(fit, least, _CMP_EQ_OQ);
  const __m512i first = _mm512_set1_epi32(__builtin_ctz(static_cast<unsigned>(own_hits | fit_hits)));
  chosen.scale = _mm512_permutexvar_ps(first, _mm512_mask_blend_ps(own_hits, refined, scale));
  chosen.offset = _mm512_permutexvar_ps(first, _mm512_mask_blend_ps(own_hits, offset, mid));
  chosen.inverse = _mm512_permutexvar_ps(first, _mm512_mask_blend_ps(own_hits, refined_inverse, inverse));
  return true;
}

__mmask16 tail_mask(size_t left) {
  return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1u);
}

// codes = clamp(round_to_even((x - offset) * inverse)) into [-127, 127], 16 at a time, the tail
// masked: the reference's loops (an offset of 0 for the values: x - 0 is x, also for -0).
void store_int8_codes(const float* x, size_t n, __m512 offset, __m512 inverse, int8_t* codes) {
  const __m512 magic = _mm512_set1_ps(12582912.0f), top = _mm512_set1_ps(kInt8CodeMax), bottom = _mm512_set1_ps(-kInt8CodeMax);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 scaled = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), offset), inverse);
    const __m512 code = _mm512_max_ps(bottom, _mm512_min_ps(top, _mm512_sub_ps(_mm512_add_ps(scaled, magic), magic)));
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, m, _mm512_cvtps_epi32(code));
  }
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
  float lo, hi, x_sum;
  const bool finite = key_row_range(x, n, lo, hi, x_sum);
  if (!finite || !(key_row_max(hi, -lo) <= kKeyF16Max)) {
    std::memset(codes, 0, n);
    return kNaNKeyScaleOffset;
  }
  const float mid_offset = f16_value_f16c(0.5f * hi + 0.5f * lo);
  const float half = key_row_max(hi - mid_offset, mid_offset - lo);
  if (!(half > 0)) {
    std::memset(codes, 0, n);
    return pack_f16c(0.0f, mid_offset);
  }
  ChosenPair chosen;
  const size_t candidates = int8_key_fit_candidates(n);
  if (candidates <= 1 || !search_key_steps16(x, n, candidates, lo, hi, mid_offset, half, x_sum, chosen)) {
    const float scale = f16_scale_at_least_f16c(half / kInt8CodeMax);
    chosen = {_mm512_set1_ps(scale), _mm512_set1_ps(mid_offset), _mm512_set1_ps(1.0f / scale)};
  }

  store_int8_codes(x, n, chosen.offset, chosen.inverse, codes);
  return pack_f16c(_mm512_cvtss_f32(chosen.scale), _mm512_cvtss_f32(chosen.offset));
}

}  // namespace pagedkv::detail
