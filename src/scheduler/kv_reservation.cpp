#include "pagedkv/scheduler/kv_reservation.h"

#include <fmt/format.h>

#include <algorithm>

#include "pagedkv/core/error.h"

namespace pagedkv {

std::string_view kv_reservation_name(KVReservation r) {
  switch (r) {
    case KVReservation::kPaged:
      return "paged";
    case KVReservation::kMax:
      return "max";
    case KVReservation::kPow2:
      return "pow2";
    case KVReservation::kOracle:
      return "oracle";
  }
  return "?";
}

KVReservation parse_kv_reservation(std::string_view name) {
  for (KVReservation r : {KVReservation::kPaged, KVReservation::kMax, KVReservation::kPow2, KVReservation::kOracle})
    if (kv_reservation_name(r) == name) return r;
  throw ConfigError(fmt::format("unknown KV reservation policy '{}' (paged, max, pow2 or oracle)", name));
}

int kv_reservation_tokens(KVReservation policy, int prompt_tokens, int max_tokens, int known_output_tokens,
                          int max_model_len) {
  const bool known = known_output_tokens >= 0 && policy != KVReservation::kMax;
  int output = known ? known_output_tokens : max_tokens;
  if (known && policy == KVReservation::kPow2) {
    int p = 1;
    while (p < output && p < (1 << 30)) p *= 2;
    output = p;
  }
  if (policy == KVReservation::kPaged) throw UsageError("kv_reservation_tokens: the paged policy reserves nothing");
  const int64_t tokens = static_cast<int64_t>(prompt_tokens) + std::max(output, 0);
  return static_cast<int>(std::min<int64_t>(tokens, max_model_len));
}

}  // namespace pagedkv
