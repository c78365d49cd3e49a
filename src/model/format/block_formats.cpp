#include "pagedkv/model/format/block_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "int8_rounding.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {

namespace {

int8_t i8(int v) { return static_cast<int8_t>(v); }

// Legacy blocks: byte j holds element j (low nibble) and element j + 16 (high nibble); Q5's fifth
// bit of element j is bit j of the little-endian 32-bit qh.
void unpack_nibbles(const uint8_t* qs, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = i8(qs[j] & 0xF);
    q[j + 16] = i8(qs[j] >> 4);
  }
}
void add_fifth_bits(const uint8_t* qh_bytes, int bias, int8_t* q) {
  uint32_t qh = 0;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) q[j] = i8(q[j] + static_cast<int>(((qh >> j) & 1) << 4) - bias);
}

// Q2_K / Q3_K: each half of 128 values reads 32 bytes four times, shifting by 2 bits each time:
// value n*128 + s*32 + l holds bits 2s..2s+1 of byte n*32 + l. Q3_K's third bit of that value is
// bit n*4 + s of hmask[l], set meaning "no -4".
void unpack_q2_k(const BlockQ2_K& b, int8_t* q) {
  for (int n = 0; n < 2; ++n)
    for (int s = 0; s < 4; ++s)
      for (int l = 0; l < 32; ++l) q[n * 128 + s * 32 + l] = i8((b.qs[n * 32 + l] >> (2 * s)) & 3);
}
void unpack_q3_k(const BlockQ3_K& b, int8_t* q) {
  for (int n = 0; n < 2; ++n)
    for (int s = 0; s < 4; ++s) {
      const int mask = 1 << (n * 4 + s);
      for (int l = 0; l < 32; ++l)
        q[n * 128 + s * 32 + l] = i8(((b.qs[n * 32 + l] >> (2 * s)) & 3) - ((b.hmask[l] & mask) ? 0 : 4));
    }
}
// Q4_K / Q5_K: each 64 values c*64.. read 32 bytes, low nibbles first then high nibbles; Q5_K's
// fifth bits are bits 2c (low half) and 2c + 1 (high half) of qh[l].
void unpack_q4_k(const uint8_t* qs, int8_t* q) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[c * 64 + l] = i8(qs[c * 32 + l] & 0xF);
      q[c * 64 + 32 + l] = i8(qs[c * 32 + l] >> 4);
    }
}
void unpack_q5_k(const BlockQ5_K& b, int8_t* q) {
  unpack_q4_k(b.qs, q);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[c * 64 + l] = i8(q[c * 64 + l] + (((b.qh[l] >> (2 * c)) & 1) << 4));
      q[c * 64 + 32 + l] = i8(q[c * 64 + 32 + l] + (((b.qh[l] >> (2 * c + 1)) & 1) << 4));
    }
}
// Q6_K: each half of 128 values reads 64 low-part bytes and 32 high-part bytes: value
// n*128 + s*32 + l takes the low (s = 0, 1) or high (s = 2, 3) nibble of ql[n*64 + (s % 2)*32 + l]
// and bits 2s..2s+1 of qh[n*32 + l].
void unpack_q6_k(const BlockQ6_K& b, int8_t* q) {
  for (int n = 0; n < 2; ++n)
    for (int s = 0; s < 4; ++s)
      for (int l = 0; l < 32; ++l) {
        const int low = (b.ql[n * 64 + (s % 2) * 32 + l] >> (s < 2 ? 0 : 4)) & 0xF;
        const int high = (b.qh[n * 32 + l] >> (2 * s)) & 3;
        q[n * 128 + s * 32 + l] = i8((low | (high << 4)) - 32);
      }
}
void unpack_iq4(const uint8_t* qs, int blocks_of_32, int8_t* q) {
  for (int ib = 0; ib < blocks_of_32; ++ib)
    for (int j = 0; j < 16; ++j) {
      q[ib * 32 + j] = kIq4NlValues[qs[ib * 16 + j] & 0xF];
      q[ib * 32 + 16 + j] = kIq4NlValues[qs[ib * 16 + j] >> 4];
    }
}

template <typename Block>
const Block& block_at(const void* row, size_t k) {
  return static_cast<const Block*>(row)[k];
}

}  // namespace

void unpack_q3_k_scales(const uint8_t packed[12], int8_t out[16]) {
  // Bytes 0..7 hold the low 4 bits of scales 0..7 (low nibble) and 8..15 (high nibble); bytes
  // 8..11 hold the high 2 bits, scale i's in bits 2*(i / 4)..+1 of byte 8 + i % 4.
  for (int i = 0; i < 16; ++i) {
    const int low = (packed[i % 8] >> (i < 8 ? 0 : 4)) & 0xF;
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = i8(low | (high << 4));
  }
}

void unpack_levels(TensorType t, const void* block, int8_t* q) {
  switch (t) {
    case TensorType::kQ4_1:
      unpack_nibbles(static_cast<const BlockQ4_1*>(block)->qs, q);
      return;
    case TensorType::kQ5_0: {
      const auto& b = *static_cast<const BlockQ5_0*>(block);
      unpack_nibbles(b.qs, q);
      add_fifth_bits(b.qh, 16, q);
      return;
    }
    case TensorType::kQ5_1: {
      const auto& b = *static_cast<const BlockQ5_1*>(block);
      unpack_nibbles(b.qs, q);
      add_fifth_bits(b.qh, 0, q);
      return;
    }
    case TensorType::kIQ4_NL:
      unpack_iq4(static_cast<const BlockIQ4_NL*>(block)->qs, 1, q);
      return;
    case TensorType::kQ2_K:
      unpack_q2_k(*static_cast<const BlockQ2_K*>(block), q);
      return;
    case TensorType::kQ3_K:
      unpack_q3_k(*static_cast<const BlockQ3_K*>(block), q);
      return;
    case TensorType::kQ4_K:
      unpack_q4_k(static_cast<const BlockQ4_K*>(block)->qs, q);
      return;
    case TensorType::kQ5_K:
      unpack_q5_k(*static_cast<const BlockQ5_K*>(block), q);
      return;
    case TensorType::kQ6_K:
      unpack_q6_k(*static_cast<const BlockQ6_K*>(block), q);
      return;
    case TensorType::kIQ4_XS:
      unpack_iq4(static_cast<const BlockIQ4_XS*>(block)->qs, 8, q);
      return;
    default:
      break;
  }
  throw UsageError(fmt::format("unpack_levels: {} is not a block format of block_formats.h", tensor_type_name(t)));
}

void dequantize_blocks(TensorType t, const void* row, std::span<float> out) {
  const auto traits = tensor_type_traits(static_cast<uint32_t>(t));
  if (!traits) throw UsageError("dequantize_blocks: unknown type");
  const size_t per_block = static_cast<size_t>(traits->block_elements);
  const size_t blocks = out.size() / per_block;
  int8_t q[kSuperBlock];
  for (size_t k = 0; k < blocks; ++k) {
    float* y = out.data() + k * per_block;
    const void* block = static_cast<const std::byte*>(row) + k * static_cast<size_t>(traits->block_bytes);
    unpack_levels(t, block, q);
    // Each value is computed with ggml's float operations in ggml's order (a scale product first,
    // then times the level, then minus the min product), so the results are the same floats.
    switch (t) {
      case TensorType::kQ4_1:
      case TensorType::kQ5_1: {
        const uint16_t* dm = static_cast<const uint16_t*>(block);  // d, m lead both blocks
        const float d = f16_to_f32(dm[0]), m = f16_to_f32(dm[1]);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d + m;
        break;
      }
      case TensorType::kQ5_0:
      case TensorType::kIQ4_NL: {
        const float d = f16_to_f32(*static_cast<const uint16_t*>(block));
        for (int j = 0; j < 32; ++j)
          y[j] = t == TensorType::kQ5_0 ? static_cast<float>(q[j]) * d : d * static_cast<float>(q[j]);
        break;
      }
      case TensorType::kQ2_K: {
        const auto& b = block_at<BlockQ2_K>(row, k);
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int s = 0; s < 16; ++s) {
          const float dl = d * static_cast<float>(b.scales[s] & 0xF), ml = dmin * static_cast<float>(b.scales[s] >> 4);
          for (int l = 0; l < 16; ++l) y[s * 16 + l] = dl * static_cast<float>(q[s * 16 + l]) - ml;
        }
        break;
      }
      case TensorType::kQ3_K: {
        const auto& b = block_at<BlockQ3_K>(row, k);
        int8_t sc[16];
        unpack_q3_k_scales(b.scales, sc);
        const float d = f16_to_f32(b.d);
        for (int s = 0; s < 16; ++s) {
          const float dl = d * static_cast<float>(sc[s] - 32);
          for (int l = 0; l < 16; ++l) y[s * 16 + l] = dl * static_cast<float>(q[s * 16 + l]);
        }
        break;
      }
      case TensorType::kQ4_K:
      case TensorType::kQ5_K: {
        const uint16_t* dm = static_cast<const uint16_t*>(block);  // d, dmin, then the scales
        const uint8_t* packed = static_cast<const uint8_t*>(block) + 4;
        const float d = f16_to_f32(dm[0]), dmin = f16_to_f32(dm[1]);
        for (int s = 0; s < 8; ++s) {
          uint8_t sc = 0, mn = 0;
          q4_k_scale_min(s, packed, sc, mn);
          const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
          for (int l = 0; l < 32; ++l) y[s * 32 + l] = d1 * static_cast<float>(q[s * 32 + l]) - m1;
        }
        break;
      }
      case TensorType::kQ6_K: {
        const auto& b = block_at<BlockQ6_K>(row, k);
        const float d = f16_to_f32(b.d);
        for (int e = 0; e < kSuperBlock; ++e)
          y[e] = d * static_cast<float>(b.scales[e / 16]) * static_cast<float>(q[e]);
        break;
      }
      case TensorType::kIQ4_XS: {
        const auto& b = block_at<BlockIQ4_XS>(row, k);
        const float d = f16_to_f32(b.d);
        for (int s = 0; s < 8; ++s) {
          const float dl = d * static_cast<float>(iq4_xs_scale(b, s) - 32);
          for (int l = 0; l < 32; ++l) y[s * 32 + l] = dl * static_cast<float>(q[s * 32 + l]);
        }
        break;
      }
      default:
        throw UsageError(fmt::format("dequantize_blocks: {} is not supported", tensor_type_name(t)));
    }
  }
}

void quantize_row_q8_1(std::span<const float> x, BlockQ8_1* out) {
  for (size_t k = 0; k < x.size() / 32; ++k) {
    const float* v = x.data() + k * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      out[k].qs[j] = rounded_int8(v[j] * id);
      sum += out[k].qs[j];
    }
    out[k].d = f32_to_f16(d);
    out[k].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

void quantize_row_q8_k(std::span<const float> x, BlockQ8_K* out) {
  for (size_t k = 0; k < x.size() / kSuperBlock; ++k) {
    const float* v = x.data() + k * kSuperBlock;
    BlockQ8_K& b = out[k];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kSuperBlock; ++j)
      if (std::fabs(v[j]) > amax) {
        amax = std::fabs(v[j]);
        max = v[j];
      }
    if (amax == 0.0f) {
      b.d = 0.0f;
      std::memset(b.qs, 0, sizeof b.qs);
      std::memset(b.bsums, 0, sizeof b.bsums);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kSuperBlock; ++j) b.qs[j] = rounded_int8(iscale * v[j]);  // at most 127: |iscale * v| <= 127
    for (int g = 0; g < kSuperBlock / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[g * 16 + j];
      b.bsums[g] = static_cast<int16_t>(sum);
    }
    b.d = 1.0f / iscale;
  }
}

}  // namespace pagedkv
