#include "pagedkv/core/dtype.h"

namespace pagedkv {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    case DType::kFP8:
      return "fp8";
    case DType::kInt8:
      return "int8";
    case DType::kInt4:
      return "int4";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "f32" || s == "float32" || s == "float") return DType::kF32;
  if (s == "fp16" || s == "f16" || s == "float16" || s == "half") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp8" || s == "f8" || s == "fp8_e4m3") return DType::kFP8;  // e4m3 only: e5m2 is not stored
  if (s == "int8" || s == "i8") return DType::kInt8;
  if (s == "int4" || s == "i4") return DType::kInt4;
  return std::nullopt;
}

}  // namespace pagedkv
