#include "pagedkv/model/format/tensor_type.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/block_formats.h"
#include "int8_rounding.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {

std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw_type) {
  switch (static_cast<TensorType>(raw_type)) {
    case TensorType::kF32:
      return TensorTypeTraits{"F32", 1, 4};
    case TensorType::kF16:
      return TensorTypeTraits{"F16", 1, 2};
    case TensorType::kQ4_0:
      return TensorTypeTraits{"Q4_0", 32, 18};
    case TensorType::kQ4_1:
      return TensorTypeTraits{"Q4_1", 32, 20};
    case TensorType::kQ5_0:
      return TensorTypeTraits{"Q5_0", 32, 22};
    case TensorType::kQ5_1:
      return TensorTypeTraits{"Q5_1", 32, 24};
    case TensorType::kQ8_0:
      return TensorTypeTraits{"Q8_0", 32, 34};
    case TensorType::kQ8_1:
      return TensorTypeTraits{"Q8_1", 32, 36};
    case TensorType::kQ2_K:
      return TensorTypeTraits{"Q2_K", 256, 84};
    case TensorType::kQ3_K:
      return TensorTypeTraits{"Q3_K", 256, 110};
    case TensorType::kQ4_K:
      return TensorTypeTraits{"Q4_K", 256, 144};
    case TensorType::kQ5_K:
      return TensorTypeTraits{"Q5_K", 256, 176};
    case TensorType::kQ6_K:
      return TensorTypeTraits{"Q6_K", 256, 210};
    case TensorType::kQ8_K:
      return TensorTypeTraits{"Q8_K", 256, 292};
    case TensorType::kIQ4_NL:
      return TensorTypeTraits{"IQ4_NL", 32, 18};
    case TensorType::kIQ4_XS:
      return TensorTypeTraits{"IQ4_XS", 256, 136};
    case TensorType::kI8:
      return TensorTypeTraits{"I8", 1, 1};
    case TensorType::kI16:
      return TensorTypeTraits{"I16", 1, 2};
    case TensorType::kI32:
      return TensorTypeTraits{"I32", 1, 4};
    case TensorType::kI64:
      return TensorTypeTraits{"I64", 1, 8};
    case TensorType::kF64:
      return TensorTypeTraits{"F64", 1, 8};
    case TensorType::kBF16:
      return TensorTypeTraits{"BF16", 1, 2};
  }
  return std::nullopt;
}

std::string tensor_type_name(TensorType t) {
  auto traits = tensor_type_traits(static_cast<uint32_t>(t));
  return traits ? traits->name : fmt::format("type {}", static_cast<uint32_t>(t));
}

bool is_runnable_weight_type(TensorType t) {
  switch (t) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_NL:
    case TensorType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

const char* runnable_weight_type_names() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";
}

size_t tensor_row_bytes(TensorType t, int64_t elements) {
  auto traits = tensor_type_traits(static_cast<uint32_t>(t));
  if (!traits) throw UsageError(fmt::format("unknown tensor type {}", static_cast<uint32_t>(t)));
  return static_cast<size_t>(elements / traits->block_elements) * static_cast<size_t>(traits->block_bytes);
}

void dequantize_row(TensorType t, const void* row, std::span<float> out) {
  const size_t n = out.size();
  switch (t) {
    case TensorType::kF32:
      std::memcpy(out.data(), row, n * sizeof(float));
      return;
    case TensorType::kF16: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
      return;
    }
    case TensorType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
      return;
    }
    case TensorType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(b[i / kQuantBlock].d) * b[i / kQuantBlock].q[i % kQuantBlock];
      return;
    }
    case TensorType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(row);
      for (size_t k = 0; k < n / kQuantBlock; ++k) {
        const float d = f16_to_f32(b[k].d);
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          out[k * kQuantBlock + static_cast<size_t>(j)] = d * static_cast<float>((b[k].q[j] & 0x0F) - 8);
          out[k * kQuantBlock + static_cast<size_t>(j) + 16] = d * static_cast<float>((b[k].q[j] >> 4) - 8);
        }
      }
      return;
    }
    default:
      if (is_runnable_weight_type(t)) return dequantize_blocks(t, row, out);
      break;
  }
  throw UsageError(fmt::format("dequantize_row: {} weights are not supported", tensor_type_name(t)));
}

void quantize_row_q8_0(std::span<const float> x, BlockQ8_0* out) {
  for (size_t k = 0; k < x.size() / kQuantBlock; ++k) {
    const float* v = x.data() + k * kQuantBlock;
    float amax = 0.0f;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out[k].d = f32_to_f16(d);
    // nearbyint rounds ties to even in the default rounding mode, as the SIMD conversion does.
    for (int j = 0; j < kQuantBlock; ++j) out[k].q[j] = rounded_int8(v[j] * id);
  }
}

void quantize_row_q4_0(std::span<const float> x, BlockQ4_0* out) {
  for (size_t k = 0; k < x.size() / kQuantBlock; ++k) {
    const float* v = x.data() + k * kQuantBlock;
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < kQuantBlock; ++j)
      if (std::fabs(v[j]) > amax) {
        amax = std::fabs(v[j]);
        max = v[j];
      }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[k].d = f32_to_f16(d);
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(truncated_int8(v[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(truncated_int8(v[j + 16] * id + 8.5f)));
      out[k].q[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace pagedkv
