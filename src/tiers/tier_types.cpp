#include "pagedkv/tiers/tier_types.h"

#include <algorithm>

namespace pagedkv {

std::string_view tier_kind_name(TierKind t) {
  switch (t) {
    case TierKind::kDevice:
      return "device";
    case TierKind::kHost:
      return "host";
    case TierKind::kDisk:
      return "disk";
    case TierKind::kRemote:
      return "remote";
  }
  return "?";
}

StoredBlockKey StoredBlockKey::from(const BlockContentKey& key) {
  StoredBlockKey k;
  k.hash = key.hash;
  k.parent = key.parent;
  k.extra_digest = key.extra_digest;
  k.group = key.group;
  k.tokens.assign(key.tokens.begin(), key.tokens.end());
  return k;
}

BlockContentKey StoredBlockKey::view() const {
  BlockContentKey k;
  k.hash = hash;
  k.parent = parent;
  k.tokens = tokens;
  k.extra_digest = extra_digest;
  k.group = group;
  return k;
}

bool StoredBlockKey::matches(const BlockContentKey& key) const {
  return hash == key.hash && parent == key.parent && extra_digest == key.extra_digest && group == key.group &&
         std::equal(tokens.begin(), tokens.end(), key.tokens.begin(), key.tokens.end());
}

}  // namespace pagedkv
