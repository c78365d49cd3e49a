#include "pagedkv/model/format/weight_quantizers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/block_formats.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {

namespace {

// A scale stored as fp16, and the float it reads back as.
struct Fp16Scale {
  uint16_t bits = 0;
  float value = 0;
};
Fp16Scale fp16_scale(float v) {
  const uint16_t h = f32_to_f16(v);
  return {h, f16_to_f32(h)};
}

int nearest(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::lround(v)), lo, hi); }
// Scales and mins round up: a step a little too large loses a little resolution, one too small
// would clip the block's extremes by up to half a scale unit times the level count.
int round_up(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::ceil(v)), lo, hi); }

// Q4_K / Q5_K: `levels` = 15 or 31. Writes d, dmin, the packed scales and returns the level
// (0..levels) of every value in `q`.
void quantize_min_max(const float* x, int levels, uint16_t& d_bits, uint16_t& dmin_bits, uint8_t scales[12],
                      uint8_t q[kSuperBlock]) {
  float step[8], offset[8];
  float max_step = 0, max_offset = 0;
  for (int j = 0; j < 8; ++j) {
    const float* v = x + 32 * j;
    const float lo = std::min(0.0f, *std::min_element(v, v + 32));
    const float hi = std::max(0.0f, *std::max_element(v, v + 32));
    step[j] = (hi - lo) / static_cast<float>(levels);
    offset[j] = -lo;
    max_step = std::max(max_step, step[j]);
    max_offset = std::max(max_offset, offset[j]);
  }
  const Fp16Scale d = fp16_scale(max_step / 63.0f), dmin = fp16_scale(max_offset / 63.0f);
  d_bits = d.bits;
  dmin_bits = dmin.bits;
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d.value > 0 ? round_up(step[j] / d.value, 0, 63) : 0);
    mn[j] = static_cast<uint8_t>(dmin.value > 0 ? round_up(offset[j] / dmin.value, 0, 63) : 0);
  }
  // The inverse of q4_k_scale_min (block_formats.h).
  std::memset(scales, 0, 12);
  for (int j = 0; j < 4; ++j) {
    scales[j] = sc[j];
    scales[j + 4] = mn[j];
  }
  for (int j = 4; j < 8; ++j) {
    scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
    scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((sc[j] >> 4) << 6));
    scales[j] = static_cast<uint8_t>(scales[j] | ((mn[j] >> 4) << 6));
  }
  for (int j = 0; j < 8; ++j) {
    const float s = d.value * static_cast<float>(sc[j]), m = dmin.value * static_cast<float>(mn[j]);
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = static_cast<uint8_t>(s > 0 ? nearest((x[32 * j + l] + m) / s, 0, levels) : 0);
  }
}

// Value c*64 + l is the low nibble of qs[c*32 + l], value c*64 + 32 + l its high nibble.
void pack_q4_k_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[c * 32 + l] = static_cast<uint8_t>((q[c * 64 + l] & 0xF) | ((q[c * 64 + 32 + l] & 0xF) << 4));
}

void quantize_q4_k(const float* x, BlockQ4_K& b) {
  uint8_t q[kSuperBlock];
  quantize_min_max(x, 15, b.d, b.dmin, b.scales, q);
  pack_q4_k_nibbles(q, b.qs);
}

void quantize_q5_k(const float* x, BlockQ5_K& b) {
  uint8_t q[kSuperBlock];
  quantize_min_max(x, 31, b.d, b.dmin, b.scales, q);
  pack_q4_k_nibbles(q, b.qs);
  // The fifth bit of value c*64 + l is bit 2c of qh[l], of value c*64 + 32 + l bit 2c + 1.
  std::memset(b.qh, 0, sizeof b.qh);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      b.qh[l] = static_cast<uint8_t>(b.qh[l] | ((q[c * 64 + l] >> 4) << (2 * c)) |
                                     ((q[c * 64 + 32 + l] >> 4) << (2 * c + 1)));
}

void quantize_q6_k(const float* x, BlockQ6_K& b) {
  float step[16], max_step = 0;
  for (int j = 0; j < 16; ++j) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
    step[j] = amax / 31.0f;
    max_step = std::max(max_step, step[j]);
  }
  const Fp16Scale d = fp16_scale(max_step / 127.0f);
  b.d = d.bits;
  uint8_t q[kSuperBlock];
  for (int j = 0; j < 16; ++j) {
    b.scales[j] = static_cast<int8_t>(d.value > 0 ? round_up(step[j] / d.value, 0, 127) : 0);
    const float s = d.value * static_cast<float>(b.scales[j]);
    for (int l = 0; l < 16; ++l)
      q[16 * j + l] = static_cast<uint8_t>((s > 0 ? nearest(x[16 * j + l] / s, -32, 31) : 0) + 32);
  }
  // Value n*128 + s*32 + l: its low 4 bits in ql[n*64 + (s % 2)*32 + l] (low nibble for s < 2,
  // high nibble otherwise), its high 2 bits in bits 2s..2s+1 of qh[n*32 + l].
  std::memset(b.ql, 0, sizeof b.ql);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int n = 0; n < 2; ++n)
    for (int s = 0; s < 4; ++s)
      for (int l = 0; l < 32; ++l) {
        const int v = q[n * 128 + s * 32 + l];
        uint8_t& low = b.ql[n * 64 + (s % 2) * 32 + l];
        low = static_cast<uint8_t>(low | ((v & 0xF) << (s < 2 ? 0 : 4)));
        b.qh[n * 32 + l] = static_cast<uint8_t>(b.qh[n * 32 + l] | ((v >> 4) << (2 * s)));
      }
}

// The index of the level of kIq4NlValues nearest to v.
int nearest_iq4_level(float v) {
  int best = 0;
  float best_distance = std::fabs(v - kIq4NlValues[0]);
  for (int i = 1; i < 16; ++i) {
    const float distance = std::fabs(v - kIq4NlValues[i]);
    if (distance < best_distance) {
      best = i;
      best_distance = distance;
    }
  }
  return best;
}

void quantize_iq4_xs(const float* x, BlockIQ4_XS& b) {
  float step[8], max_step = 0;
  for (int j = 0; j < 8; ++j) {
    float peak = 0;  // the value of largest magnitude
    for (int l = 0; l < 32; ++l)
      if (std::fabs(x[32 * j + l]) > std::fabs(peak)) peak = x[32 * j + l];
    step[j] = peak < 0 ? -peak / 127.0f : peak / 113.0f;  // the table runs from -127 to 113
    max_step = std::max(max_step, step[j]);
  }
  const Fp16Scale d = fp16_scale(max_step / 31.0f);
  b.d = d.bits;
  b.scales_h = 0;
  std::memset(b.scales_l, 0, sizeof b.scales_l);
  for (int j = 0; j < 8; ++j) {
    const int multiple = d.value > 0 ? round_up(step[j] / d.value, 0, 31) : 0;
    const int stored = multiple + 32;  // the format's scales are biased by 32
    b.scales_l[j / 2] = static_cast<uint8_t>(b.scales_l[j / 2] | ((stored & 0xF) << (4 * (j % 2))));
    b.scales_h = static_cast<uint16_t>(b.scales_h | ((stored >> 4) << (2 * j)));
    const float s = d.value * static_cast<float>(multiple);
    uint8_t idx[32];
    for (int l = 0; l < 32; ++l) idx[l] = static_cast<uint8_t>(nearest_iq4_level(s > 0 ? x[32 * j + l] / s : 0.0f));
    // Value j*32 + l is the low nibble of qs[j*16 + l], value j*32 + 16 + l its high nibble.
    for (int l = 0; l < 16; ++l) b.qs[j * 16 + l] = static_cast<uint8_t>(idx[l] | (idx[16 + l] << 4));
  }
}

}  // namespace

bool can_quantize_weights(TensorType t) {
  return t == TensorType::kQ4_K || t == TensorType::kQ5_K || t == TensorType::kQ6_K || t == TensorType::kIQ4_XS;
}

void quantize_weight_row(TensorType t, std::span<const float> x, void* out) {
  if (!can_quantize_weights(t))
    throw UsageError(fmt::format("quantize_weight_row: cannot write {}", tensor_type_name(t)));
  if (x.size() % kSuperBlock != 0)
    throw UsageError(fmt::format("quantize_weight_row: a {} row of {} values is not whole blocks of 256",
                                 tensor_type_name(t), x.size()));
  const size_t blocks = x.size() / kSuperBlock;
  for (size_t k = 0; k < blocks; ++k) {
    const float* v = x.data() + k * kSuperBlock;
    switch (t) {
      case TensorType::kQ4_K:
        quantize_q4_k(v, static_cast<BlockQ4_K*>(out)[k]);
        break;
      case TensorType::kQ5_K:
        quantize_q5_k(v, static_cast<BlockQ5_K*>(out)[k]);
        break;
      case TensorType::kQ6_K:
        quantize_q6_k(v, static_cast<BlockQ6_K*>(out)[k]);
        break;
      default:
        quantize_iq4_xs(v, static_cast<BlockIQ4_XS*>(out)[k]);
        break;
    }
  }
}

}  // namespace pagedkv
