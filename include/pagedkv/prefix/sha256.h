// SHA-256 (FIPS 180-4) for block hashing, on the x86 SHA extensions when the CPU has them.
//
// A block hash is SHA-256 of an 80-byte message (parent hash + 16 tokens): two compressions,
// whose cost through OpenSSL's EVP interface is as much call overhead as hashing. The hardware
// path compresses pre-padded messages directly, and can compress several independent messages
// interleaved ("lanes": different requests' hash chains), so that one chain's instruction
// latency overlaps the others' (a chain itself is serial: each block's message holds its
// parent's digest). Without SHA extensions callers use OpenSSL (sha256_hash in block_hasher.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedkv {

// Most messages compressed interleaved in one call.
inline constexpr int kSha256MaxLanes = 4;

// Run-time CPU check (cached): SHA extensions and SSSE3/SSE4.1, which the hardware path uses.
// The environment variable PAGEDKV_SHA256=openssl turns it off (for comparisons).
bool sha256_hardware_available();

// Bytes of a `len`-byte message once padded (a multiple of 64).
constexpr size_t sha256_padded_size(size_t len) { return (len + 8) / 64 * 64 + 64; }

// Writes the FIPS 180-4 padding of a `len`-byte message into buf[len, sha256_padded_size(len)):
// the 0x80 byte, zeros, the bit length big-endian. Bytes [0, len) are the message, untouched.
void sha256_pad(std::byte* buf, size_t len);

// SHA-256 of `num_lanes` (1..kSha256MaxLanes) padded messages of `num_blocks` 64-byte blocks
// each, interleaved; digest i (32 bytes) goes to digests[i]. Only when sha256_hardware_available().
void sha256_hardware_lanes(const std::byte* const* messages, int num_lanes, size_t num_blocks, std::byte* const* digests);

}  // namespace pagedkv
