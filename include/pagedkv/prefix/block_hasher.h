// Chained block hashing for prefix caching.
//
//   hash(block i) = H(parent || tokens || extra keys),  parent = hash(block i-1) or the root
//
// Byte format (explicit, so hashes agree across processes, runs and machines):
//   parent:  lo then hi, each uint64 little-endian (16 bytes)
//   tokens:  each token id as int32 little-endian
//   extra:   tagged fields, see extra_keys.h
//   root:    H("pagedkv/root/v1" || seed as uint64 LE); the seed is configuration.
// H is XXH3-128 (default, seeded with the configured seed) or SHA-256 truncated to its first
// 16 bytes (lo = bytes 0..7 LE, hi = bytes 8..15 LE).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "pagedkv/core/block_hash.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/prefix/extra_keys.h"

namespace pagedkv {

enum class HashAlgorithm { kXxh3_128, kSha256 };
std::string_view hash_algorithm_name(HashAlgorithm a);
std::optional<HashAlgorithm> parse_hash_algorithm(std::string_view s);

// A raw hash function over bytes; injectable so tests can force collisions.
using HashFunction = BlockHash (*)(std::span<const std::byte> bytes, uint64_t seed);
BlockHash xxh3_128_hash(std::span<const std::byte> bytes, uint64_t seed);
// SHA-256 on the CPU's SHA extensions when it has them (prefix/sha256.h), else OpenSSL.
BlockHash sha256_hash(std::span<const std::byte> bytes, uint64_t seed);
// The same digest, always through OpenSSL (the reference the hardware path is tested against).
BlockHash sha256_hash_openssl(std::span<const std::byte> bytes, uint64_t seed);
// 64-bit digest of extra-key bytes (0 for none), stored beside cached blocks for confirmation.
uint64_t extra_keys_digest(std::span<const std::byte> bytes);

// One request's block hashes to extend (BlockHasher::extend_many): its tokens and keys, and
// the parallel arrays to append to.
struct BlockHashJob {
  std::span<const TokenId> tokens;
  PrefixKeys keys;
  std::vector<BlockHash>* hashes = nullptr;
  std::vector<uint64_t>* digests = nullptr;
};

class BlockHasher {
 public:
  BlockHasher(int block_size, HashAlgorithm algorithm = HashAlgorithm::kXxh3_128, uint64_t seed = 0);
  BlockHasher(int block_size, HashFunction fn, uint64_t seed);

  int block_size() const { return block_size_; }
  HashAlgorithm algorithm() const { return algorithm_; }
  uint64_t seed() const { return seed_; }
  const BlockHash& root() const { return root_; }

  // Hash of one full block. Not thread-safe (uses a scratch buffer); use one hasher per thread.
  BlockHash hash_block(const BlockHash& parent, std::span<const TokenId> tokens,
                       std::span<const std::byte> extra) const;

  // Extends `hashes` with the hashes of every full block of `tokens` beyond those already
  // present, and `digests` with their extra-key digests when `keys` has any (after padding it
  // with zeros to the blocks hashed before; without keys it is left alone: see
  // Request::block_extra_digests). Cheap when nothing is new.
  void extend(std::span<const TokenId> tokens, const PrefixKeys& keys, std::vector<BlockHash>& hashes,
              std::vector<uint64_t>& digests) const;

  // extend() for several requests: the same hashes, computed faster by interleaving the chains
  // of up to kSha256MaxLanes requests (a chain itself is serial: each block's message holds its
  // parent's hash), for XXH3-128 and for SHA-256 on the CPU's SHA extensions; with AVX-512,
  // SHA-256 chains of 16 requests at a time while at least 9 have blocks left. Requests with
  // extra keys go one by one.
  void extend_many(std::span<const BlockHashJob> jobs) const;
  // Whether a few requests' next blocks hash faster together (extend_many) than one by one: true
  // for SHA-256 on the SHA extensions, whose single chain waits on each round's latency; false
  // for XXH3-128 (a batch of a step's few new blocks measured 2 % slower in the peer replay than
  // hashing each where it is needed) and OpenSSL.
  bool small_batches_pay() const { return lanes_ == Lanes::kSha256Hardware; }

  // What computes the block hashes: "xxh3_128", "sha256 (AVX-512 16 lanes, SHA extensions)"
  // (batches on AVX-512, single chains on the SHA extensions), "sha256 (SHA extensions)",
  // "sha256 (OpenSSL)" or "custom" (an injected HashFunction).
  std::string_view implementation() const;

 private:
  int block_size_;
  HashAlgorithm algorithm_;
  HashFunction fn_;
  uint64_t seed_;
  BlockHash root_;
  // Blocks without extra keys skip hash_block (and OpenSSL) for these two: their chains are hashed
  // in lanes (extend_in_lanes), from messages laid out once.
  enum class Lanes { kNone, kXxh3, kSha256Hardware };
  Lanes lanes_ = Lanes::kNone;
  void extend_in_lanes(std::span<const BlockHashJob> jobs) const;  // jobs without extra keys
  struct Lane;
  template <int kWidth, typename Step>
  void run_lanes(std::span<const BlockHashJob> jobs, int min_active, Step step) const;
  mutable std::vector<std::byte> scratch_;
  // kSha256WideLanes messages (parent hash, a block's tokens, SHA-256 padding), padded once.
  mutable std::vector<std::byte> lane_messages_;
};

}  // namespace pagedkv
