// How much KV memory a request holds, for reproducing the PagedAttention paper's baselines in the
// same engine (docs/paper.md). `kPaged` is pagedkv's normal path: blocks are allocated as the
// sequence grows, anywhere in the pool. The others are the paper's Orca variants: at admission a
// request reserves its whole sequence in one contiguous range of blocks (ContiguousAllocator) and
// holds it until it finishes:
//   kMax     prompt + max_tokens (Orca (Max): the most the request may ever need)
//   kPow2    prompt + the next power of two >= the actual output length (Orca (Pow2): at most 2x over)
//   kOracle  prompt + the actual output length (Orca (Oracle): the length known in advance)
// The actual output length is StopConditions::known_output_tokens; without it kPow2 and kOracle
// fall back to max_tokens. Reservations are capped at max_model_len and rounded up to whole blocks.
#pragma once

#include <string_view>

namespace pagedkv {

enum class KVReservation { kPaged, kMax, kPow2, kOracle };

std::string_view kv_reservation_name(KVReservation r);
// "paged", "max", "pow2" or "oracle"; ConfigError naming the choices otherwise.
KVReservation parse_kv_reservation(std::string_view name);

// Tokens a request reserves under `policy` (not kPaged): see above. `known_output_tokens` < 0: unknown.
int kv_reservation_tokens(KVReservation policy, int prompt_tokens, int max_tokens, int known_output_tokens,
                          int max_model_len);

}  // namespace pagedkv
