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

// Most messages compressed interleaved in one call on the SHA extensions.
inline constexpr int kSha256MaxLanes = 4;
// Messages one AVX-512 call compresses: one per 32-bit lane of a 512-bit register.
inline constexpr int kSha256WideLanes = 16;

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
void sha256_hardware_lanes(const std::byte* const* messages, int num_lanes, size_t num_blocks,
                           std::byte* const* digests);

// Run-time CPU check (cached): AVX-512 F and BW with the OS saving their state. Off with
// PAGEDKV_SHA256=openssl or =sha-extensions (comparisons), and with PAGEDKV_ISA=scalar or avx2.
bool sha256_avx512_available();

// SHA-256 of kSha256WideLanes padded messages of `num_blocks` 64-byte blocks each, one message
// per lane of AVX-512 registers (the rounds in plain vector arithmetic: on a core with full-width
// AVX-512 units 16 messages cost far less than 16 SHA-extension compressions, but one message
// costs as much as 16). Digest i (32 bytes) goes to digests[i]. Only when sha256_avx512_available().
void sha256_avx512_x16(const std::byte* const* messages, size_t num_blocks, std::byte* const* digests);

// One step of 16 hash chains over 80-byte messages (a block of 16 tokens after its parent's
// hash): lane l's message is the 16 bytes at parents[l] followed by the 64 bytes at data[l]; its
// digest's first 16 bytes (the block's hash, the next block's parent) replace those at
// parents[l]. The padding is built in registers. Only when sha256_avx512_available().
void sha256_avx512_chain80_x16(std::byte* const* parents, const std::byte* const* data);

// The portable twin of the vector paths, one padded message in plain C++ (tests compare the
// hardware and AVX-512 paths with it and with OpenSSL).
void sha256_scalar(const std::byte* message, size_t num_blocks, std::byte* digest);

}  // namespace pagedkv
