// Where a pool's KV slots go at one instant, in the categories of the PagedAttention paper's
// Fig. 2: slots holding token states, slots reserved for tokens a request will still produce,
// internal fragmentation (allocated to a request that will never fill them), external
// fragmentation (free, but not usable by a contiguous allocation), and the rest of the free space.
// The categories tile the pool: total_slots is their sum.
#pragma once

#include <cstdint>

namespace pagedkv {

struct KVMemoryBreakdown {
  int64_t total_slots = 0;  // usable blocks x block size
  int64_t token_states = 0;  // slots holding a computed token's K and V (a shared block counts once)
  int64_t reserved = 0;  // reserved now for tokens the request will still compute (reservations)
  // Allocated but never to be filled: the tail of each sequence's last block (paged), slots
  // reserved beyond the final length (max, pow2) and rounding a reservation up to whole blocks.
  int64_t internal_fragmentation = 0;
  // Free slots outside the largest free contiguous range (reservations; 0 when paged: any free
  // block serves any request).
  int64_t external_fragmentation = 0;
  int64_t free = 0;  // the largest free range (reservations), or every free slot (paged)

  int64_t used() const { return token_states + reserved + internal_fragmentation; }
};

}  // namespace pagedkv
