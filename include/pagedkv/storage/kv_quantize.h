// Quantized KV rows: one token's keys (or values) for one KV head, head_dim elements, stored as
// int8 or fp8 (e4m3) codes with one f32 scale of their own, element = scale * code.
//
// Symmetric and per (token, head), so a row is quantized once, when write_kv stores it, from that
// row alone: no calibration (llama2.c checkpoints carry no KV scales), and a block never needs
// re-quantizing when tokens are appended to it. With amax = max |x| over the row:
//   int8: scale = amax / 127, code = round-to-nearest-even(x / scale) in [-127, 127] (-128 is
//         never produced, so the range is symmetric); |x - scale * code| <= scale / 2.
//   fp8:  scale = amax / 448, code = f32_to_fp8_e4m3(x / scale): the largest element maps to the
//         format's largest finite value, and the relative error is at most 2^-4 for the rest.
// An all-zero row has scale 0 and zero codes. A row holding a NaN or an infinity gets a NaN scale
// and zero codes: it reads back as NaN, as an f32 cache would give NaN to the attention.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedkv/core/dtype.h"

namespace pagedkv {

inline constexpr float kInt8CodeMax = 127.0f;

// Quantizes n elements of x into codes (int8_t for kInt8, uint8_t fp8 codes for kFP8) and
// returns the row's scale. Throws UsageError for another dtype.
float quantize_row(DType dtype, const float* x, size_t n, void* codes);

// quantize_row_int8_fitted's search: about this many elements' work per row, at most this many
// candidate steps, the smallest code the row's largest element takes.
inline constexpr size_t kInt8FitElementBudget = 128, kInt8FitMaxCandidates = 16;
inline constexpr float kInt8FitLowestTopCode = 112.0f;

// int8 with the step fitted to the row (the keys' quantizer): the codes and scale, among
// candidate steps, that leave the row the smallest squared error Σ (x - scale * code)². The
// candidates are amax / m for m evenly from 127 (quantize_row's step, which is the first) down to
// kInt8FitLowestTopCode, each also refined to the least-squares scale of its codes; codes are
// always round_to_even(x / scale), so every element stays within half a step of the scale
// returned, and the error is never above quantize_row's. Why: with one scale for 8 or 16
// elements, where the step falls against the row's values decides most of its error, and a
// fitted step halves it on stories260K's 8-element key rows (docs/quantized_kv.md). The work is
// int8_fitted_scale_candidates(n) passes of two over the row: rows of 128 elements or more take
// quantize_row's single step, whose error a fitted one lowers by a few percent only.
float quantize_row_int8_fitted(const float* x, size_t n, int8_t* codes);

// How many candidate steps quantize_row_int8_fitted tries for a row of n elements: about
// kInt8FitElementBudget elements' work in all, 1 (quantize_row alone) from 128 elements.
size_t int8_fitted_scale_candidates(size_t n);

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
