// copy_checksummed for AVX2 (this file gets -mavx2): XXH3's accumulate loop in 256-bit lanes,
// and streamed copies on request. Called only after a run-time CPU check (remote_value_copy.cpp).
//
// A load writes a block into the arena that nobody reads through this cache soon: it is one of a
// prefix's many (megabytes), read when attention reaches it. Ordinary stores first read every
// destination line they fill and evict the engine's working set; streaming stores do neither
// (a 20 KiB block from a warm read buffer into a cold arena: 1.3 against 3.5 us on the shared
// Xeon). A pack writes a buffer the store lane sends next, often still cached: not streamed (it
// measured slower).
#define XXH_INLINE_ALL
#include <immintrin.h>
#include <xxhash.h>

#include <cstdint>

#include "remote_value_copy_kernel.h"

namespace pagedkv::tiers_detail {
namespace {

// Pieces shorter than this are copied through the cache: a streamed partial line costs more than
// the read it saves.
constexpr size_t kStreamedMinBytes = 256;

const std::byte* copy_streamed(std::byte* to, const std::byte* from, size_t n) {
  if (n < kStreamedMinBytes) {
    std::memcpy(to, from, n);
    return to;
  }
  // Up to the destination's first 32-byte boundary through the cache, then whole 32-byte stores.
  const size_t head = (32 - reinterpret_cast<uintptr_t>(to) % 32) % 32;
  std::memcpy(to, from, head);
  size_t i = head;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i + 96), d);
  }
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i)));
  std::memcpy(to + i, from + i, n - i);
  return from;  // the source, just read: the destination's lines went to memory
}

const std::byte* copy_cached(std::byte* to, const std::byte* from, size_t n) {
  std::memcpy(to, from, n);
  return to;
}

}  // namespace

uint64_t copy_checksummed_avx2(std::span<const ChecksummedPiece> pieces, CopyWrites writes) {
  if (writes == CopyWrites::kThroughCache) return copy_checksummed_kernel(pieces, copy_cached);
  const uint64_t h = copy_checksummed_kernel(pieces, copy_streamed);
  // Streaming stores are weakly ordered: fenced before the bytes are handed to another thread
  // (a mutex release alone does not order them).
  _mm_sfence();
  return h;
}

}  // namespace pagedkv::tiers_detail
