#include "pagedkv/model/model.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "model_internal.h"

namespace pagedkv {

namespace detail {

std::optional<uint64_t> checked_llama2c_body_floats(const ModelConfig& c) {
  // Sum of products of positive int32 fields; any of them can overflow 64 bits for a hostile
  // header, so every step is checked.
  uint64_t total = 0;
  bool overflow = false;
  for_each_llama2c_tensor(c, [&](WeightField, std::initializer_list<uint64_t> factors) {
    uint64_t p = 1;
    for (uint64_t f : factors) overflow |= __builtin_mul_overflow(p, f, &p);
    overflow |= __builtin_add_overflow(total, p, &total);
  });
  if (overflow) return std::nullopt;
  return total;
}

}  // namespace detail

size_t llama2c_body_floats(const ModelConfig& config) {
  config.validate();
  auto floats = detail::checked_llama2c_body_floats(config);
  if (!floats || *floats > SIZE_MAX / sizeof(float))
    throw ConfigError(fmt::format("model config {} is too large to address", config.describe()));
  return static_cast<size_t>(*floats);
}

ModelWeights llama2c_weight_views(const ModelConfig& c, const float* body) {
  ModelWeights w;
  const float* p = body;
  for_each_llama2c_tensor(c, [&](WeightField field, std::initializer_list<uint64_t> factors) {
    if (field != nullptr) w.*field = p;
    p += tensor_floats(factors);
  });
  if (c.shared_classifier) w.wcls = w.token_embedding;
  return w;
}

}  // namespace pagedkv
