#include "pagedkv/block/kv_events.h"

namespace pagedkv {

std::string_view kv_event_kind_name(KVEventKind k) {
  switch (k) {
    case KVEventKind::kBlockStored:
      return "stored";
    case KVEventKind::kBlockRemoved:
      return "removed";
    case KVEventKind::kAllBlocksCleared:
      return "all_cleared";
  }
  return "?";
}

std::string_view removal_reason_name(RemovalReason r) {
  switch (r) {
    case RemovalReason::kNone:
      return "none";
    case RemovalReason::kEvicted:
      return "evicted";
    case RemovalReason::kReset:
      return "reset";
    case RemovalReason::kInvalidated:
      return "invalidated";
    case RemovalReason::kSlidOut:
      return "slid_out";
  }
  return "?";
}

std::string_view medium_name(Medium m) {
  switch (m) {
    case Medium::kDevice:
      return "device";
    case Medium::kHost:
      return "host";
    case Medium::kDisk:
      return "disk";
  }
  return "?";
}

std::optional<Medium> parse_medium(std::string_view name) {
  for (Medium m : {Medium::kDevice, Medium::kHost, Medium::kDisk})
    if (name == medium_name(m)) return m;
  return std::nullopt;
}

}  // namespace pagedkv
