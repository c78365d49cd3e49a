// Helpers shared by the model sources; not part of the public API.
#pragma once

#include <cstdint>
#include <optional>

#include "pagedkv/model/model_config.h"

namespace pagedkv::detail {

// Floats in a llama2.c checkpoint body for `c`, or nullopt if the count overflows 64 bits.
// `c` must have positive fields (head_dim is taken as dim / n_heads).
std::optional<uint64_t> checked_llama2c_body_floats(const ModelConfig& c);

}  // namespace pagedkv::detail
