// The block formats of ggml's other quantized weight types, as GGUF files store them (little-endian,
// no padding), beyond Q8_0 and Q4_0 (tensor_type.h): Q4_1, Q5_0, Q5_1, the K-quants Q2_K..Q6_K,
// IQ4_NL and IQ4_XS, and the activation formats Q8_1 and Q8_K that their products use.
//
// Legacy blocks of 32 values (element j and j + 16 share a byte: low nibble, high nibble):
//   Q4_1:   fp16 d, fp16 m, 16 bytes of nibbles;           value = d * q + m
//   Q5_0:   fp16 d, 32 high bits (bit j for element j), nibbles;  value = d * (q - 16)
//   Q5_1:   fp16 d, fp16 m, 32 high bits, nibbles;         value = d * q + m
//   IQ4_NL: fp16 d, nibbles indexing kIq4NlValues;         value = d * kIq4NlValues[q]
//   Q8_1:   fp16 d, fp16 s = d * sum(q), 32 int8 q;        value = d * q   (activations)
// K-quant super-blocks of 256 values (QK_K), split into sub-blocks with their own scales:
//   Q2_K: 16 bytes of (4-bit scale | 4-bit min << 4), one per 16 values; 2-bit q; fp16 d, dmin.
//         value = d * scale * q - dmin * min
//   Q3_K: 32 bytes of high bits, 2-bit low bits, 12 bytes of sixteen 6-bit scales; fp16 d.
//         value = d * (scale - 32) * (q - (high bit ? 0 : 4))
//   Q4_K: fp16 d, dmin; 12 bytes of eight 6-bit scales and mins (one per 32 values); 4-bit q.
//         value = d * scale * q - dmin * min
//   Q5_K: as Q4_K plus 32 bytes of high bits (q is 5-bit)
//   Q6_K: 4-bit low parts, 2-bit high parts, sixteen int8 scales (one per 16 values); fp16 d.
//         value = d * scale * (q - 32)
//   IQ4_XS: fp16 d, eight 6-bit scales (high 2 bits in a uint16, low 4 in 4 bytes), nibbles
//         indexing kIq4NlValues per 32 values.   value = d * (scale - 32) * kIq4NlValues[q]
//   Q8_K: float32 d, 256 int8 q, sixteen int16 sums of 16 q each (activations)
// Where the bits of each value lie inside a block is spelt out by the functions that read them
// (block_formats.cpp); dequantization computes each value with the same float operations, in the
// same order, as ggml's, so dequantized weights equal its bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pagedkv/model/format/tensor_type.h"

namespace pagedkv {

inline constexpr int kSuperBlock = 256;  // values per K-quant / IQ4_XS / Q8_K block (ggml's QK_K)

struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[32];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
struct BlockQ8_K {
  float d;
  int8_t qs[kSuperBlock];
  int16_t bsums[kSuperBlock / 16];
};
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 &&
              sizeof(BlockQ8_1) == 36 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_XS) == 136 &&
              sizeof(BlockQ8_K) == 292);

// The 16 non-uniform levels of IQ4_NL and IQ4_XS.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Unpacking of the sub-block scales, shared by dequantization and the dot products.
// Q3_K: the sixteen 6-bit scales, still biased by 32.
void unpack_q3_k_scales(const uint8_t packed[12], int8_t out[16]);
// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7).
inline void q4_k_scale_min(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
// IQ4_XS: the 6-bit scale of sub-block j (0..7), still biased by 32.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// The integer levels of one block before any scale is applied, in element order: what both
// dequantization and the dot products read. Legacy blocks give 32 values, the others 256.
//   Q4_1: 0..15;  Q5_0: -16..15;  Q5_1: 0..31;  IQ4_NL / IQ4_XS: kIq4NlValues;
//   Q2_K: 0..3 (scale and min per 16 values: element e uses scales[e / 16]);
//   Q3_K: -4..3 (scale e / 16);  Q4_K: 0..15, Q5_K: 0..31 (scale and min e / 32);
//   Q6_K: -32..31 (scale e / 16).
void unpack_levels(TensorType t, const void* block, int8_t* q);

// Dequantizes `out.size()` values (a multiple of the type's block) of one row of a type this
// header describes. Throws UsageError for another type.
void dequantize_blocks(TensorType t, const void* row, std::span<float> out);

// Activation quantizers, as ggml's CPU back end quantizes the input of a product.
// Q8_1 (Q4_1 / Q5_1 weights): as Q8_0 (d = max|x| / 127, q = x * 127 / max|x| rounded to
// nearest, ties to even), plus s = fp16(d * sum(q)).
void quantize_row_q8_1(std::span<const float> x, BlockQ8_1* out);
// Q8_K (K-quant / IQ4_XS weights), per 256 values: m = the value of largest magnitude (the first
// on ties), iscale = -127 / m, q = round-half-even(iscale * x) capped at 127, d = 1 / iscale as
// float32, and the sums of each 16 q. An all-zero block gets d = 0 and q = 0.
void quantize_row_q8_k(std::span<const float> x, BlockQ8_K* out);

}  // namespace pagedkv
