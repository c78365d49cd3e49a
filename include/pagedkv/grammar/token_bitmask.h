// Token bitmasks: one bit per vocabulary id, packed in uint32 words (bit id % 32 of word id / 32,
// 1 = allowed), the layout XGrammar and vLLM use. Applying one sets the logits of disallowed
// tokens to -inf in place, so a sampler then only ever draws an allowed token.
#pragma once

#include <cstdint>
#include <span>

namespace pagedkv::grammar {

inline bool bitmask_allows(std::span<const uint32_t> mask, int32_t id) {
  return (mask[static_cast<size_t>(id) / 32] >> (static_cast<uint32_t>(id) % 32)) & 1u;
}

// logits[i] = -inf for every i < logits.size() whose bit is clear. `mask` must have at least
// (logits.size() + 31) / 32 words (else UsageError); bits past the logits are ignored.
void apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> mask);

}  // namespace pagedkv::grammar
