// Quantized KV rows: one token's keys (or values) for one KV head, head_dim elements, stored as
// int8 or fp8 (e4m3) codes with one f32 scale of their own, element = scale * code (int8 keys:
// an f16 scale and an f16 offset, element = scale * code + offset; below).
//
// Per (token, head), so a row is quantized once, when write_kv stores it, from that
// row alone: no calibration (llama2.c checkpoints carry no KV scales), and a block never needs
// re-quantizing when tokens are appended to it. With amax = max |x| over the row:
//   int8: scale = amax / 127, code = round-to-nearest-even(x / scale) in [-127, 127] (-128 is
//         never produced, so the range is symmetric); |x - scale * code| <= scale / 2.
//   fp8:  scale = amax / 448, code = f32_to_fp8_e4m3(x / scale): the largest element maps to the
//         format's largest finite value, and the relative error is at most 2^-4 for the rest.
// An all-zero row has scale 0 and zero codes. A row holding a NaN or an infinity gets a NaN scale
// and zero codes: it reads back as NaN, as an f32 cache would give NaN to the attention.
// That is quantize_row, the values' format (and fp8 keys'); int8 keys add an offset, below.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedkv/core/dtype.h"
#include "pagedkv/storage/cpu_isa.h"

namespace pagedkv {

inline constexpr float kInt8CodeMax = 127.0f;

// Quantizes n elements of x into codes (int8_t for kInt8, uint8_t fp8 codes for kFP8) and
// returns the row's scale. Throws UsageError for another dtype. The isa picks the build, as for
// quantize_key_row_int8 below (int8 has AVX2 and AVX-512 ones; every build gives the same bits).
float quantize_row(DType dtype, const float* x, size_t n, void* codes, KernelIsa isa = KernelIsa::kAuto);

// int8 keys are asymmetric: key ~ scale * code + offset, with scale and offset as two f16 in the
// row's 4 scale bytes (scale in the low half; values and fp8 keep one f32 scale). Why: the keys
// carry int8's accuracy loss, and with one scale for 8 or 16 elements two things decide most of a
// row's error: where its values sit against zero (an offset at the row's midpoint (max + min) / 2
// centres the codes, so the step spans the row's range, not twice its largest magnitude) and
// where the step falls against its values (a fitted step). So quantize_key_row_int8 tries
// int8_key_fit_candidates(n) steps range / (2 m), m evenly from 127 down to kInt8FitLowestTopCode,
// around the f16 midpoint, each also refined to the least-squares (scale, offset) of its codes
// (rounded to f16, the codes rounded again), and keeps the pair with the smallest squared error
// sum (x - scale * code - offset)^2. On stories260K's 8-element rotated key rows this cut the mean KL
// divergence 3.5x against amax / 127 (docs/quantized_kv.md).
//
// Every element is within half a step of scale * code + offset for the f16 scale and offset
// stored (the scale is rounded up, never down, past range / 255). A row holding a NaN, an
// infinity or an element beyond +-kKeyF16Max gets kNaNKeyScaleOffset and zero codes (it reads
// back as NaN); a row whose elements all equal an f16 value has scale 0; an empty row (0, 0).
struct KeyScaleOffset {
  float scale, offset;
};
inline constexpr float kKeyF16Max = 32768.0f;
inline constexpr uint32_t kNaNKeyScaleOffset = 0x7E007E00u;  // both halves an f16 NaN
// About kInt8FitElementBudget elements' work per row's candidates, at most kInt8FitMaxCandidates
// of them, and the smallest code the ends of the row's range take (int8_key_fit_candidates).
inline constexpr size_t kInt8FitElementBudget = 128, kInt8FitMaxCandidates = 16;
inline constexpr float kInt8FitLowestTopCode = 112.0f;

// Whether keys of this dtype are stored with an offset (int8). Inline: the tiers' layout
// fingerprint asks it without linking the quantizers.
constexpr bool int8_keys_have_offsets(DType dtype) { return dtype == DType::kInt8; }

// Quantizes an int8 key row into codes and returns its packed f16 scale and offset. The isa picks
// the build (kAuto: best_available_isa()): kAvx512 searches the 16 candidates in one register,
// kAvx2 in two, kScalar runs the SSE2 reference; every build gives the same bits (a path this
// CPU lacks throws UsageError, as resolve_isa does).
uint32_t quantize_key_row_int8(const float* x, size_t n, int8_t* codes, KernelIsa isa = KernelIsa::kAuto);
uint32_t pack_key_scale_offset(float scale, float offset);
KeyScaleOffset unpack_key_scale_offset(uint32_t packed);

// How many candidate steps quantize_key_row_int8 tries for a row of n elements:
// kInt8FitElementBudget / n, at most kInt8FitMaxCandidates, and 1 where that would be below 4
// (16 for 8 elements, 8 for 16, 4 for 32, 1 from 33: rows that wide take the midpoint and
// range / 254 only, where fitting would lower the error a few percent for several passes over
// the row). The SSE2 build tries them four at a time, one per lane; AVX2 eight, AVX-512 all 16.
constexpr size_t int8_key_fit_candidates(size_t n) {
  const size_t budget = n <= 1 ? kInt8FitElementBudget : kInt8FitElementBudget / n;
  const size_t candidates = budget < kInt8FitMaxCandidates ? budget : kInt8FitMaxCandidates;
  return candidates >= 4 ? candidates : 1;  // fewer would leave SSE2 lanes idle for a small gain
}

// out[i] = scale * code[i], in f32 (exact but for the one rounding of the product).
void dequantize_row(DType dtype, const void* codes, float scale, size_t n, float* out);

// max |x| over n elements, or NaN when the row holds a NaN or an infinity: the amax of
// quantize_row (also the attention driver's for its int16 query codes).
float row_amax(const float* x, size_t n);

// Rounds to the nearest integer, ties to even, for |x| <= 2^22: adding and subtracting 1.5 * 2^23
// leaves the rounded value in f32 (the default rounding mode), the same as std::nearbyint, which
// on baseline x86-64 is a libm call per element (4 us of the 4.2 us that write_kv took per token
// of 8 x 128 int8 elements, K and V).
inline float round_to_even(float x) { return (x + 12582912.0f) - 12582912.0f; }

}  // namespace pagedkv
