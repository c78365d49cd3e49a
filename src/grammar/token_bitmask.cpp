#include "pagedkv/grammar/token_bitmask.h"

#include <limits>

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv::grammar {

void apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> mask) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  if (mask.size() < (n + 31) / 32)
    throw UsageError(fmt::format("a bitmask of {} words cannot cover {} logits", mask.size(), n));
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = mask[w];
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i)
      if (!((bits >> (i - w * 32)) & 1u)) logits[i] = minus_inf;
  }
}

}  // namespace pagedkv::grammar
