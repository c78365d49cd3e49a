// The loop under remote_value_copy.h, compiled once per instruction set (remote_value_copy.cpp,
// remote_value_copy_avx2.cpp): each includes xxhash.h inline with its own flags first and
// passes the copy it uses for one chunk.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>

#include "pagedkv/tiers/remote_value_copy.h"

namespace pagedkv::tiers_detail {
namespace {

// Pieces are copied and hashed this many bytes at a time: the chunk is still in L1 when hashed.
constexpr size_t kChecksummedChunkBytes = 8 << 10;

// `copy_chunk(to, from, n)` copies one chunk and returns where to hash it from: the copy when it
// went through the cache, the source when it did not (a streamed copy is not read back).
template <class CopyChunk>
inline uint64_t copy_checksummed_kernel(std::span<const ChecksummedPiece> pieces, CopyChunk&& copy_chunk) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  for (const ChecksummedPiece& p : pieces) {
    for (size_t done = 0; done < p.bytes;) {
      const size_t n = std::min(kChecksummedChunkBytes, p.bytes - done);
      XXH3_64bits_update(&state, copy_chunk(p.to + done, p.from + done, n), n);
      done += n;
    }
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace
}  // namespace pagedkv::tiers_detail
