#include "block_dot.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/block_formats.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv::quant_detail {

namespace {

// Sum of q[i] * x[i] over n values.
int dot_i8(const int8_t* q, const int8_t* x, int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += q[i] * x[i];
  return sum;
}

// Legacy 32-value blocks against Q8_0: sum * (d_w * d_x).
float dot_legacy_q8_0(TensorType t, const std::byte* w, const BlockQ8_0* x, int blocks, size_t block_bytes) {
  float acc = 0.0f;
  int8_t q[32];
  for (int b = 0; b < blocks; ++b) {
    const std::byte* wb = w + static_cast<size_t>(b) * block_bytes;
    unpack_levels(t, wb, q);
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(wb));
    acc += static_cast<float>(dot_i8(q, x[b].q, 32)) * (d * f16_to_f32(x[b].d));
  }
  return acc;
}

// Q4_1 / Q5_1 against Q8_1: sum * (d_w * d_x) + m_w * s_x.
float dot_legacy_q8_1(TensorType t, const std::byte* w, const BlockQ8_1* x, int blocks, size_t block_bytes) {
  float acc = 0.0f;
  int8_t q[32];
  for (int b = 0; b < blocks; ++b) {
    const std::byte* wb = w + static_cast<size_t>(b) * block_bytes;
    unpack_levels(t, wb, q);
    const uint16_t* dm = reinterpret_cast<const uint16_t*>(wb);
    acc += static_cast<float>(dot_i8(q, x[b].qs, 32)) * (f16_to_f32(dm[0]) * f16_to_f32(x[b].d)) +
           f16_to_f32(dm[1]) * f16_to_f32(x[b].s);
  }
  return acc;
}

// K-quants and IQ4_XS against Q8_K.
float dot_super_q8_k(TensorType t, const std::byte* w, const BlockQ8_K* x, int blocks, size_t block_bytes) {
  float acc = 0.0f;
  int8_t q[kSuperBlock];
  for (int b = 0; b < blocks; ++b) {
    const std::byte* wb = w + static_cast<size_t>(b) * block_bytes;
    const BlockQ8_K& a = x[b];
    unpack_levels(t, wb, q);
    int sum = 0, mins = 0;  // scale-weighted products; mins against the 16-value activation sums
    float d = 0.0f, dmin = 0.0f;
    switch (t) {
      case TensorType::kQ2_K: {
        const auto& blk = *reinterpret_cast<const BlockQ2_K*>(wb);
        for (int s = 0; s < 16; ++s) {
          sum += (blk.scales[s] & 0xF) * dot_i8(q + s * 16, a.qs + s * 16, 16);
          mins += (blk.scales[s] >> 4) * a.bsums[s];
        }
        d = f16_to_f32(blk.d);
        dmin = f16_to_f32(blk.dmin);
        break;
      }
      case TensorType::kQ3_K: {
        const auto& blk = *reinterpret_cast<const BlockQ3_K*>(wb);
        int8_t sc[16];
        unpack_q3_k_scales(blk.scales, sc);
        for (int s = 0; s < 16; ++s) sum += (sc[s] - 32) * dot_i8(q + s * 16, a.qs + s * 16, 16);
        d = f16_to_f32(blk.d);
        break;
      }
      case TensorType::kQ4_K:
      case TensorType::kQ5_K: {
        const uint16_t* dm = reinterpret_cast<const uint16_t*>(wb);
        const uint8_t* packed = reinterpret_cast<const uint8_t*>(wb) + 4;
        for (int s = 0; s < 8; ++s) {
          uint8_t sc = 0, mn = 0;
          q4_k_scale_min(s, packed, sc, mn);
          sum += sc * dot_i8(q + s * 32, a.qs + s * 32, 32);
          mins += mn * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
        }
        d = f16_to_f32(dm[0]);
        dmin = f16_to_f32(dm[1]);
        break;
      }
      case TensorType::kQ6_K: {
        const auto& blk = *reinterpret_cast<const BlockQ6_K*>(wb);
        for (int s = 0; s < 16; ++s) sum += blk.scales[s] * dot_i8(q + s * 16, a.qs + s * 16, 16);
        d = f16_to_f32(blk.d);
        break;
      }
      case TensorType::kIQ4_XS: {
        const auto& blk = *reinterpret_cast<const BlockIQ4_XS*>(wb);
        for (int s = 0; s < 8; ++s) sum += (iq4_xs_scale(blk, s) - 32) * dot_i8(q + s * 32, a.qs + s * 32, 32);
        d = f16_to_f32(blk.d);
        break;
      }
      default:
        throw UsageError(fmt::format("block_dot: {} has no Q8_K product", tensor_type_name(t)));
    }
    acc += (d * a.d) * static_cast<float>(sum) - (dmin * a.d) * static_cast<float>(mins);
  }
  return acc;
}

}  // namespace

bool is_block_format(TensorType weight) {
  switch (weight) {
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

TensorType activation_type(TensorType weight) {
  switch (weight) {
    case TensorType::kQ5_0:
    case TensorType::kIQ4_NL:
      return TensorType::kQ8_0;
    case TensorType::kQ4_1:
    case TensorType::kQ5_1:
      return TensorType::kQ8_1;
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_XS:
      return TensorType::kQ8_K;
    default:
      break;
  }
  throw UsageError(fmt::format("activation_type: {} is not a block format", tensor_type_name(weight)));
}

size_t activation_row_bytes(TensorType weight, int cols) { return tensor_row_bytes(activation_type(weight), cols); }

void quantize_activations(TensorType weight, const float* x, int cols, std::byte* out) {
  const std::span<const float> row{x, static_cast<size_t>(cols)};
  switch (activation_type(weight)) {
    case TensorType::kQ8_0:
      quantize_row_q8_0(row, reinterpret_cast<BlockQ8_0*>(out));
      return;
    case TensorType::kQ8_1:
      quantize_row_q8_1(row, reinterpret_cast<BlockQ8_1*>(out));
      return;
    default:
      quantize_row_q8_k(row, reinterpret_cast<BlockQ8_K*>(out));
      return;
  }
}

float block_dot(TensorType weight, const std::byte* w_row, const std::byte* x_row, int cols) {
  const auto traits = tensor_type_traits(static_cast<uint32_t>(weight));
  const size_t block_bytes = static_cast<size_t>(traits->block_bytes);
  const int blocks = cols / traits->block_elements;
  switch (activation_type(weight)) {
    case TensorType::kQ8_0:
      return dot_legacy_q8_0(weight, w_row, reinterpret_cast<const BlockQ8_0*>(x_row), blocks, block_bytes);
    case TensorType::kQ8_1:
      return dot_legacy_q8_1(weight, w_row, reinterpret_cast<const BlockQ8_1*>(x_row), blocks, block_bytes);
    default:
      return dot_super_q8_k(weight, w_row, reinterpret_cast<const BlockQ8_K*>(x_row), blocks, block_bytes);
  }
}

namespace {

void scalar_block_rows(TensorType type, const std::byte* w, size_t row_bytes, int cols, int r0, int r1,
                       const std::byte* acts, size_t act_stride, int num_tokens, float* y, size_t y_stride) {
  for (int r = r0; r < r1; ++r)
    for (int t = 0; t < num_tokens; ++t)
      y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)] =
          block_dot(type, w + static_cast<size_t>(r) * row_bytes, acts + static_cast<size_t>(t) * act_stride, cols);
}

}  // namespace

const BlockRowsKernel& scalar_block_kernel() {
  static const BlockRowsKernel k{scalar_block_rows};
  return k;
}

}  // namespace pagedkv::quant_detail
