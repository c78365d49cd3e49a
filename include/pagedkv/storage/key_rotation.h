// Rotated keys for the quantized KV formats: int8 and fp8 store H k instead of k, with H the
// normalized Walsh-Hadamard matrix of the head dimension (orthonormal and symmetric, H H = I).
//
// Why: one scale per (token, head) row makes the step amax / 127, so one large element (keys
// have outlier channels) coarsens every other element of the row. H spreads each element over
// the whole row, so the rotated row's amax is close to its RMS and the step shrinks; the error
// in the keys, the one int8 attention is sensitive to, falls (llama.cpp's finding for 4-bit K).
// Attention is unchanged, because (H q) . (H k) = q . k: the kernels rotate each query row once
// and read the stored codes as they are. Values are not rotated (their error averages out in the
// weighted sum). Reading keys back to f32 (gather_kv) rotates them back.
//
// Only power-of-two head dimensions up to 512 rotate (every model here: 8 to 256); others store
// k as is.
#pragma once

#include <cstddef>

#include "pagedkv/core/dtype.h"
#include "pagedkv/storage/cpu_isa.h"

namespace pagedkv {

// The widest head dimension that rotates (a bound for stack buffers); wider ones store k as is.
inline constexpr size_t kMaxRotatedHeadDim = 512;

// Whether keys of this format and head dimension are stored rotated.
bool keys_are_rotated(DType dtype, int head_dim);

// x <- H x in place for n a power of two (the fast Walsh-Hadamard transform, scaled by
// 1 / sqrt(n)); its own inverse.
void hadamard_rotate(float* x, size_t n);

// hadamard_rotate of `rows` rows of n elements, one after another, in place, with the widest
// build `isa` allows (AVX-512, AVX2; src/storage/key_rotation_avx*.cpp): the same bits as
// hadamard_rotate row by row (test_storage_quantize_isa).
void hadamard_rotate_rows(float* x, size_t rows, size_t n, KernelIsa isa = KernelIsa::kAuto);

}  // namespace pagedkv
