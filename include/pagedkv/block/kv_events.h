// KV-cache events for routers and external indexes (vLLM's BlockStored / BlockRemoved /
// AllBlocksCleared). The pool records them only when enabled; callers drain them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

enum class KVEventKind : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
// kInvalidated: cached for a step whose compute was cancelled (its bytes were never written).
// kSlidOut: a sliding-window block that left every request's window and is no retention
// checkpoint: dropped when freed (no reachable lookup can use it), so it is never offloaded.
enum class RemovalReason : uint8_t { kNone, kEvicted, kReset, kInvalidated, kSlidOut };
// Where the block lives; lower tiers emit the same events with their own medium.
enum class Medium : uint8_t { kDevice, kHost, kDisk };
constexpr int kNumMedia = 3;
// A set of media (routers' indexes): bit i set = present in Medium(i).
using MediumMask = uint8_t;
constexpr MediumMask medium_bit(Medium m) { return static_cast<MediumMask>(1u << static_cast<unsigned>(m)); }

struct KVEvent {
  KVEventKind kind = KVEventKind::kBlockStored;
  BlockHash hash;  // stored/removed block
  BlockHash parent_hash;  // stored: the previous block's hash (or the root hash)
  bool has_parent = false;  // false for a request's first block
  int32_t token_count = 0;  // stored: tokens in the block
  BlockId block;  // physical block id in its medium
  uint16_t group = 0;
  // The group's attention kind and window (0 unless sliding), so that an external index can
  // tell a full-attention prefix block from a sliding-window checkpoint.
  AttentionKind attention_kind = AttentionKind::kFull;
  int32_t sliding_window = 0;
  RemovalReason reason = RemovalReason::kNone;
  Medium medium = Medium::kDevice;
};

std::string_view kv_event_kind_name(KVEventKind k);
std::string_view removal_reason_name(RemovalReason r);
std::string_view medium_name(Medium m);
std::optional<Medium> parse_medium(std::string_view name);  // the inverse of medium_name

}  // namespace pagedkv
