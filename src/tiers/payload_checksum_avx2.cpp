// XXH3-64 of block payloads compiled for AVX2 (this file gets -mavx2): the checksum is one full
// pass over every block written to or read from the disk tier, and AVX2 doubles its speed.
// Called only after a run-time CPU check (disk_slot_format.cpp); the digest is the same bits.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace pagedkv::tiers_detail {

uint64_t payload_checksum_avx2(const std::byte* data, size_t bytes) { return XXH3_64bits(data, bytes); }

}  // namespace pagedkv::tiers_detail
