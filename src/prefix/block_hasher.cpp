#include "pagedkv/prefix/block_hasher.h"

#include <fmt/format.h>
#include <emmintrin.h>
#include <openssl/evp.h>
#define XXH_INLINE_ALL  // small inputs: inlining beats the shared library call
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <utility>

#include "pagedkv/core/error.h"
#include "pagedkv/prefix/sha256.h"

namespace pagedkv {

static_assert(std::endian::native == std::endian::little, "pagedkv serializes little-endian");

std::string_view hash_algorithm_name(HashAlgorithm a) { return a == HashAlgorithm::kSha256 ? "sha256" : "xxh3_128"; }

std::optional<HashAlgorithm> parse_hash_algorithm(std::string_view s) {
  if (s == "xxh3_128" || s == "xxh3" || s == "xxhash") return HashAlgorithm::kXxh3_128;
  if (s == "sha256" || s == "sha-256") return HashAlgorithm::kSha256;
  return std::nullopt;
}

BlockHash xxh3_128_hash(std::span<const std::byte> bytes, uint64_t seed) {
  XXH128_hash_t h = XXH3_128bits_withSeed(bytes.data(), bytes.size(), seed);
  return BlockHash{h.low64, h.high64};
}

namespace {

// Room for `n` entries, growing geometrically: a request's arrays grow one block at a time as it
// decodes, and an exact reserve would reallocate on every block.
template <typename T>
void reserve_for(std::vector<T>& v, size_t n) {
  if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
}

// OpenSSL 3's one-shot SHA256() looks the algorithm up in the provider registry on every call,
// which costs more than hashing a block (~260 ns of ~360 ns for 80 bytes). The algorithm is
// fetched once per process and each thread reuses one digest context.
struct Sha256Context {
  Sha256Context() : md(EVP_MD_fetch(nullptr, "SHA256", nullptr)), ctx(EVP_MD_CTX_new()) {
    if (!md || !ctx) throw Error("SHA-256: OpenSSL could not provide the SHA256 digest");
  }
  ~Sha256Context() {
    EVP_MD_CTX_free(ctx);
    EVP_MD_free(md);
  }
  Sha256Context(const Sha256Context&) = delete;
  Sha256Context& operator=(const Sha256Context&) = delete;
  EVP_MD* md;
  EVP_MD_CTX* ctx;
};

}  // namespace

BlockHash sha256_hash(std::span<const std::byte> bytes, uint64_t /*seed: in the root only*/) {
  if (sha256_hardware_available()) {
    const size_t padded = sha256_padded_size(bytes.size());
    std::array<std::byte, 256> small;
    std::vector<std::byte> large;
    std::byte* message = small.data();
    if (padded > small.size()) {
      large.resize(padded);
      message = large.data();
    }
    if (!bytes.empty()) std::memcpy(message, bytes.data(), bytes.size());
    sha256_pad(message, bytes.size());
    std::byte digest[32];
    const std::byte* messages[1] = {message};
    std::byte* digests[1] = {digest};
    sha256_hardware_lanes(messages, 1, padded / 64, digests);
    BlockHash h;
    std::memcpy(&h.lo, digest, 8);
    std::memcpy(&h.hi, digest + 8, 8);
    return h;
  }
  return sha256_hash_openssl(bytes, 0);
}

BlockHash sha256_hash_openssl(std::span<const std::byte> bytes, uint64_t /*seed: in the root only*/) {
  thread_local Sha256Context sha;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestInit_ex(sha.ctx, sha.md, nullptr) != 1 || EVP_DigestUpdate(sha.ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(sha.ctx, digest, &len) != 1 || len != 32)
    throw Error("SHA-256: OpenSSL digest failed");
  BlockHash h;
  std::memcpy(&h.lo, digest, 8);
  std::memcpy(&h.hi, digest + 8, 8);
  return h;
}

uint64_t extra_keys_digest(std::span<const std::byte> bytes) {
  return bytes.empty() ? 0 : XXH3_64bits(bytes.data(), bytes.size());
}

BlockHasher::BlockHasher(int block_size, HashAlgorithm algorithm, uint64_t seed)
    : BlockHasher(block_size, algorithm == HashAlgorithm::kSha256 ? &sha256_hash : &xxh3_128_hash, seed) {
  algorithm_ = algorithm;
}

BlockHasher::BlockHasher(int block_size, HashFunction fn, uint64_t seed)
    : block_size_(block_size), algorithm_(HashAlgorithm::kXxh3_128), fn_(fn), seed_(seed) {
  if (block_size <= 0) throw ConfigError(fmt::format("block_size must be positive, got {}", block_size));
  static constexpr char kRootTag[] = "pagedkv/root/v1";
  std::byte buf[sizeof(kRootTag) - 1 + 8];
  std::memcpy(buf, kRootTag, sizeof(kRootTag) - 1);
  std::memcpy(buf + sizeof(kRootTag) - 1, &seed, 8);
  root_ = fn_(std::span<const std::byte>(buf, sizeof(buf)), seed_);
  scratch_.reserve(16 + 4 * static_cast<size_t>(block_size) + 256);
  if (fn_ == &xxh3_128_hash) lanes_ = Lanes::kXxh3;
  if (fn_ == &sha256_hash && sha256_hardware_available()) lanes_ = Lanes::kSha256Hardware;
  if (lanes_ != Lanes::kNone) {
    const size_t length = 16 + static_cast<size_t>(block_size) * sizeof(TokenId);
    const size_t padded = sha256_padded_size(length);
    lane_messages_.resize(kSha256WideLanes * padded);
    for (size_t l = 0; l < kSha256WideLanes; ++l) sha256_pad(lane_messages_.data() + l * padded, length);
  }
}

std::string_view BlockHasher::implementation() const {
  if (fn_ == &xxh3_128_hash) return "xxh3_128";
  if (fn_ == &sha256_hash) {
    if (!sha256_hardware_available()) return "sha256 (OpenSSL)";
    return sha256_avx512_available() ? "sha256 (AVX-512 16 lanes, SHA extensions)" : "sha256 (SHA extensions)";
  }
  return "custom";
}

BlockHash BlockHasher::hash_block(const BlockHash& parent, std::span<const TokenId> tokens,
                                  std::span<const std::byte> extra) const {
  const size_t token_bytes = tokens.size() * sizeof(TokenId);
  scratch_.resize(16 + token_bytes + extra.size());
  std::byte* p = scratch_.data();
  std::memcpy(p, &parent.lo, 8);
  std::memcpy(p + 8, &parent.hi, 8);
  std::memcpy(p + 16, tokens.data(), token_bytes);
  if (!extra.empty()) std::memcpy(p + 16 + token_bytes, extra.data(), extra.size());
  return fn_(scratch_, seed_);
}

void BlockHasher::extend(std::span<const TokenId> tokens, const PrefixKeys& keys, std::vector<BlockHash>& hashes,
                         std::vector<uint64_t>& digests) const {
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t full = tokens.size() / bs;
  if (hashes.size() >= full) return;
  if (lanes_ != Lanes::kNone && keys.empty()) {
    const BlockHashJob job{tokens, keys, &hashes, &digests};
    extend_in_lanes(std::span<const BlockHashJob>(&job, 1));
    return;
  }
  reserve_for(hashes, full);
  if (!keys.empty()) {
    reserve_for(digests, full);
    digests.resize(hashes.size(), 0);  // blocks hashed while the request had no keys
  }
  std::vector<std::byte> extra;  // only touched when the request has extra keys
  for (size_t i = hashes.size(); i < full; ++i) {
    const BlockHash& parent = i == 0 ? root_ : hashes[i - 1];
    if (!keys.empty()) {
      extra.clear();
      append_extra_keys(keys, static_cast<int>(i), block_size_, extra);
      digests.push_back(extra_keys_digest(extra));
    }
    hashes.push_back(hash_block(parent, tokens.subspan(i * bs, bs), extra));
  }
}

void BlockHasher::extend_many(std::span<const BlockHashJob> jobs) const {
  for (const BlockHashJob& job : jobs)
    if (lanes_ == Lanes::kNone || !job.keys.empty()) extend(job.tokens, job.keys, *job.hashes, *job.digests);
  if (lanes_ != Lanes::kNone) extend_in_lanes(jobs);
}

// One request's chain in a lane: the next block to hash and its parent (the previous block's hash).
struct BlockHasher::Lane {
  const BlockHashJob* job = nullptr;
  size_t next = 0;  // next block to hash
  size_t full = 0;  // full blocks of the request
  const TokenId* tokens = nullptr;  // block `next`'s tokens
  alignas(16) std::byte parent[16];  // in: block `next`'s parent; out: block `next`'s hash
};

// Each lane hashes one request's missing blocks in order; a lane whose request is done takes the
// next one, and `step` hashes every active lane's next block together (SHA-256: one interleaved
// compression call; XXH3: independent calls the out-of-order core overlaps), replacing each
// lane's parent with the block's hash. Stops once fewer than `min_active` lanes have work (every
// job assigned): what is left is in the jobs' arrays, so a later run_lanes resumes those
// requests where they stopped.
template <int kWidth, typename Step>
void BlockHasher::run_lanes(std::span<const BlockHashJob> jobs, int min_active, Step step) const {
  const size_t bs = static_cast<size_t>(block_size_);
  std::array<Lane, kWidth> lanes;
  size_t next_job = 0;
  auto take_job = [&](Lane& lane) {
    while (next_job < jobs.size()) {
      const BlockHashJob& job = jobs[next_job++];
      const size_t full = job.tokens.size() / bs;
      if (!job.keys.empty() || job.hashes->size() >= full) continue;
      reserve_for(*job.hashes, full);
      lane.job = &job;
      lane.next = job.hashes->size();
      lane.full = full;
      lane.tokens = job.tokens.data() + lane.next * bs;
      const BlockHash& parent = lane.next == 0 ? root_ : (*job.hashes)[lane.next - 1];
      std::memcpy(lane.parent, &parent.lo, 8);
      std::memcpy(lane.parent + 8, &parent.hi, 8);
      return true;
    }
    return false;
  };
  int active = 0;
  while (active < kWidth && take_job(lanes[static_cast<size_t>(active)])) ++active;
  while (active > 0 && active >= min_active) {
    step(lanes.data(), active);
    // Backwards, so that a finished lane can swap with the last active one.
    for (int l = active - 1; l >= 0; --l) {
      Lane& lane = lanes[static_cast<size_t>(l)];
      BlockHash h;
      std::memcpy(&h.lo, lane.parent, 8);
      std::memcpy(&h.hi, lane.parent + 8, 8);
      lane.job->hashes->push_back(h);  // no extra keys: no digest (Request::block_extra_digests)
      lane.tokens += bs;
      if (lane.next + 2 < lane.full) __builtin_prefetch(lane.tokens + 2 * bs);  // several streams at once
      if (++lane.next < lane.full || take_job(lane)) continue;
      std::swap(lane, lanes[static_cast<size_t>(active - 1)]);
      --active;
    }
  }
}

namespace {

// Lays out a lane's message (its parent, then its block's tokens) in `message`, whose padding
// was written at construction.
inline const std::byte* write_message(std::byte* message, const std::byte* parent, const TokenId* tokens, size_t bs) {
  std::memcpy(message, parent, 16);
  if (bs == 16)  // the common block size: a fixed-size copy is a few moves, not a libc call
    std::memcpy(message + 16, tokens, 16 * sizeof(TokenId));
  else std::memcpy(message + 16, tokens, bs * sizeof(TokenId));
  return message;
}

// A lane's pointer read on its own. Without this the vectorizer reads two lanes' pointers with
// one 16-byte load each (keeping half), and such a load cannot be forwarded the 8-byte store
// that just advanced the pointer: a store-forwarding stall per lane and step, which was 3-4 % of
// a SHA-256 peer replay.
template <typename T>
inline T* read_alone(T* p) {
  asm("" : "+r"(p));
  return p;
}

}  // namespace

void BlockHasher::extend_in_lanes(std::span<const BlockHashJob> jobs) const {
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t length = 16 + bs * sizeof(TokenId);
  const size_t padded = sha256_padded_size(length);
  const size_t num_blocks = padded / 64;
  std::byte* const message_slots = lane_messages_.data();
  const auto lane_message = [&](const Lane& lane, int l) {
    return write_message(message_slots + static_cast<size_t>(l) * padded, lane.parent, lane.tokens, bs);
  };
  if (lanes_ == Lanes::kXxh3) {
    run_lanes<kSha256MaxLanes>(jobs, 1, [&](Lane* lanes, int active) {
      for (int l = 0; l < active; ++l) {
        const XXH128_hash_t h = XXH3_128bits_withSeed(lane_message(lanes[l], l), length, seed_);
        // One 16-byte store: the lane's hash is read back as one 16-byte load (two 8-byte stores
        // cannot forward to it, and the load waits for them to retire).
        _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes[l].parent),
                         _mm_set_epi64x(static_cast<long long>(h.high64), static_cast<long long>(h.low64)));
      }
    });
    return;
  }
  if (sha256_avx512_available()) {
    // A 16-lane call costs about as much as this many blocks on the SHA extensions (AMD Zen 5:
    // a block costs about half as much in 16 AVX-512 lanes): below it, the tail goes to them.
    constexpr int kMinWideLanes = 9;
    if (block_size_ == 16) {
      // 80-byte messages: padding built in registers, tokens read where they are.
      run_lanes<kSha256WideLanes>(jobs, kMinWideLanes, [&](Lane* lanes, int active) {
        alignas(16) std::byte idle[kSha256WideLanes][16];
        std::byte* parents[kSha256WideLanes];
        const std::byte* data[kSha256WideLanes];
        for (int l = 0; l < kSha256WideLanes; ++l) {
          if (l < active) {
            parents[l] = lanes[l].parent;
            data[l] = reinterpret_cast<const std::byte*>(read_alone(lanes[l].tokens));
          } else {  // idle lanes hash a copy of lane 0's block
            std::memcpy(idle[l], lanes[0].parent, 16);
            parents[l] = idle[l];
            data[l] = data[0];
          }
        }
        sha256_avx512_chain80_x16(parents, data);
      });
    } else {
      run_lanes<kSha256WideLanes>(jobs, kMinWideLanes, [&](Lane* lanes, int active) {
        const std::byte* messages[kSha256WideLanes];
        std::byte digests[kSha256WideLanes][32];
        std::byte* digest_out[kSha256WideLanes];
        for (int l = 0; l < kSha256WideLanes; ++l) {
          messages[l] = l < active ? lane_message(lanes[l], l) : messages[0];  // idle lanes: a copy of lane 0
          digest_out[l] = digests[l];
        }
        sha256_avx512_x16(messages, num_blocks, digest_out);
        for (int l = 0; l < active; ++l) std::memcpy(lanes[l].parent, digests[l], 16);
      });
    }
  }
  run_lanes<kSha256MaxLanes>(jobs, 1, [&](Lane* lanes, int active) {
    const std::byte* messages[kSha256MaxLanes];
    std::byte digests[kSha256MaxLanes][32];
    std::byte* digest_out[kSha256MaxLanes];
    for (int l = 0; l < active; ++l) {
      messages[l] = lane_message(lanes[l], l);
      digest_out[l] = digests[l];
    }
    sha256_hardware_lanes(messages, active, num_blocks, digest_out);
    for (int l = 0; l < active; ++l) std::memcpy(lanes[l].parent, digests[l], 16);
  });
}

}  // namespace pagedkv
