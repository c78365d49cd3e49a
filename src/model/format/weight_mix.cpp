#include "pagedkv/model/format/weight_mix.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

namespace {

struct MixEntry {
  const char* name;
  TensorType base;
  uint32_t file_type;  // llama.cpp's LLAMA_FTYPE_* numbers
};
constexpr MixEntry kMixes[] = {
    {"F32", TensorType::kF32, 0},      {"F16", TensorType::kF16, 1},    {"BF16", TensorType::kBF16, 32},
    {"Q8_0", TensorType::kQ8_0, 7},    {"Q4_0", TensorType::kQ4_0, 2},  {"Q4_K_M", TensorType::kQ4_K, 15},
    {"Q5_K_M", TensorType::kQ5_K, 17}, {"Q6_K", TensorType::kQ6_K, 18}, {"IQ4_XS", TensorType::kIQ4_XS, 30},
};

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

}  // namespace

const char* WeightMix::names() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_K_M, Q5_K_M, Q6_K, IQ4_XS"; }

WeightMix WeightMix::parse(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const MixEntry& e : kMixes)
    if (upper == e.name) {
      WeightMix m;
      m.name_ = e.name;
      m.base_ = e.base;
      m.file_type_ = e.file_type;
      return m;
    }
  throw ConfigError(fmt::format("weight type '{}' is not one of {}", name, names()));
}

TensorType WeightMix::type_of(Role role, int layer, int layers, int gqa) const {
  const bool k_mix = base_ == TensorType::kQ4_K || base_ == TensorType::kQ5_K;
  const bool mixed = k_mix || base_ == TensorType::kIQ4_XS;
  if (!mixed) return base_;
  switch (role) {
    case Role::kOutput:
      return TensorType::kQ6_K;
    case Role::kAttnV:
      if (k_mix) return use_more_bits(layer, layers) ? TensorType::kQ6_K : base_;
      return gqa >= 4 ? TensorType::kQ5_K : base_;
    case Role::kFfnDown:
      if (k_mix) return use_more_bits(layer, layers) ? TensorType::kQ6_K : base_;
      return layer < layers / 8 ? TensorType::kQ5_K : base_;
    default:
      return base_;
  }
}

}  // namespace pagedkv
