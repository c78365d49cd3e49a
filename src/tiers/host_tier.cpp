#include "pagedkv/tiers/host_tier.h"

namespace pagedkv {

HostTier::HostTier(const KVCacheSpec& spec, int num_layers, int num_slots)
    : arena_(spec, num_layers, num_slots), slots_(num_slots, spec.block_size) {
  stats_.io_backend = "memcpy";
}

}  // namespace pagedkv
