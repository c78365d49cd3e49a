// What the KV-cache manager needs to know about a request: its tokens so far, how many of them
// already have KV (maintained by the caller, as vLLM's scheduler does), and the keys that decide
// which cached blocks it may share. The manager fills in the block hashes lazily.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/prefix/extra_keys.h"

namespace pagedkv {

struct Request {
  // The fields a decode step reads (the manager's fast path and a scheduler's loop) come first,
  // within the first cache line of the struct.
  RequestId id;
  std::vector<TokenId> tokens;  // prompt, then outputs as they are generated
  int num_computed_tokens = 0;  // tokens whose KV is (or is being) written; caller-maintained
  // Where the manager that holds this request's blocks keeps them: a lookup hint it maintains
  // and checks (a stale or foreign hint costs one hash lookup, nothing else). Not for callers.
  uint32_t manager_slot = ~uint32_t{0};
  int num_prompt_tokens = 0;
  int num_preemptions = 0;  // caller-maintained; lookups after a preemption are counted apart
  bool skip_prefix_cache = false;  // e.g. requests that need prompt logprobs
  int num_encoder_tokens = 0;  // cross-attention groups: encoder output length
  // Prefix-cache keys (see extra_keys.h).
  uint64_t lora_id = 0;
  std::string cache_salt;
  std::vector<MultiModalInput> mm_inputs;  // sorted by offset

  // Full-block hashes over `tokens`, and the digests of their extra keys. Computed by the
  // manager (or BlockHasher::extend) as tokens arrive. The digests run parallel to the hashes
  // but stop early, usually at 0 entries: a block past their end has no extra keys (digest 0),
  // so a request without LoRA, salt or images carries no second array.
  std::vector<BlockHash> block_hashes;
  std::vector<uint64_t> block_extra_digests;

  Request() = default;
  Request(RequestId rid, std::vector<TokenId> prompt)
      : id(rid), tokens(std::move(prompt)), num_prompt_tokens(static_cast<int>(tokens.size())) {}

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  void append_token(TokenId t) { tokens.push_back(t); }
  PrefixKeys prefix_keys() const { return PrefixKeys{lora_id, mm_inputs, cache_salt}; }
  // The extra-key digest of hash block i (0 past the stored ones).
  uint64_t block_extra_digest(size_t i) const { return i < block_extra_digests.size() ? block_extra_digests[i] : 0; }
};

}  // namespace pagedkv
