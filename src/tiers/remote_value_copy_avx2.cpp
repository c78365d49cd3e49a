// copy_checksummed for AVX2 (this file gets -mavx2): XXH3's accumulate loop in 256-bit lanes.
// Called only after a run-time CPU check (remote_value_copy.cpp).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "remote_value_copy_kernel.h"

namespace pagedkv::tiers_detail {

uint64_t copy_checksummed_avx2(std::span<const ChecksummedPiece> pieces) { return copy_checksummed_kernel(pieces); }

}  // namespace pagedkv::tiers_detail
