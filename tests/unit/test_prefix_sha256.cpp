// SHA-256 on the SHA extensions and in AVX-512 lanes: published vectors, every length against
// OpenSSL and the portable twin (sha256_scalar), interleaved lanes against one lane, the 16
// AVX-512 lanes against the twin; and BlockHasher's interleaved chains (extend_many, extend; SHA-256 and
// XXH3-128) against a hasher that hashes one block at a time through an injected function
// (OpenSSL, or XXH3 behind another function pointer): same hashes, block for block, whatever the
// lane schedule.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pagedkv/prefix/block_hasher.h"
#include "pagedkv/prefix/sha256.h"

namespace pagedkv {
namespace {

std::string hex(const std::byte* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[static_cast<unsigned>(p[i]) >> 4];
    s += kDigits[static_cast<unsigned>(p[i]) & 15];
  }
  return s;
}

// The full 32-byte digest of `message` through the hardware path (one lane).
std::string hardware_digest(const std::string& message) {
  std::vector<std::byte> buf(sha256_padded_size(message.size()));
  std::memcpy(buf.data(), message.data(), message.size());
  sha256_pad(buf.data(), message.size());
  std::byte digest[32];
  const std::byte* messages[1] = {buf.data()};
  std::byte* digests[1] = {digest};
  sha256_hardware_lanes(messages, 1, buf.size() / 64, digests);
  return hex(digest, 32);
}

// The same through the portable twin.
std::string scalar_digest(const std::string& message) {
  std::vector<std::byte> buf(sha256_padded_size(message.size()));
  std::memcpy(buf.data(), message.data(), message.size());
  sha256_pad(buf.data(), message.size());
  std::byte digest[32];
  sha256_scalar(buf.data(), buf.size() / 64, digest);
  return hex(digest, 32);
}

std::vector<std::byte> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
  return v;
}

TEST(CoreSha256, Padding) {
  EXPECT_EQ(sha256_padded_size(0), 64u);
  EXPECT_EQ(sha256_padded_size(55), 64u);
  EXPECT_EQ(sha256_padded_size(56), 128u);
  EXPECT_EQ(sha256_padded_size(80), 128u);  // a block of 16 tokens after its 16-byte parent
  std::vector<std::byte> buf(64, std::byte{0xaa});
  sha256_pad(buf.data(), 3);
  EXPECT_EQ(buf[2], std::byte{0xaa});
  EXPECT_EQ(buf[3], std::byte{0x80});
  for (size_t i = 4; i < 63; ++i) EXPECT_EQ(buf[i], std::byte{0}) << i;
  EXPECT_EQ(buf[63], std::byte{24});  // 3 bytes = 24 bits, big-endian
}

TEST(CoreSha256, PublishedVectors) {
  if (!sha256_hardware_available()) GTEST_SKIP() << "this CPU has no SHA extensions";
  EXPECT_EQ(hardware_digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hardware_digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hardware_digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hardware_digest(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CoreSha256, ScalarTwinPublishedVectorsAndEveryLength) {
  EXPECT_EQ(scalar_digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(scalar_digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(scalar_digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::mt19937_64 rng(5);
  for (size_t n = 0; n <= 300; ++n) {
    auto bytes = random_bytes(rng, n);
    std::vector<std::byte> buf(sha256_padded_size(n));
    if (n > 0) std::memcpy(buf.data(), bytes.data(), n);
    sha256_pad(buf.data(), n);
    std::byte digest[32];
    sha256_scalar(buf.data(), buf.size() / 64, digest);
    const BlockHash reference = sha256_hash_openssl(bytes, 0);
    EXPECT_EQ(std::memcmp(&reference.lo, digest, 8), 0) << "length " << n;
    EXPECT_EQ(std::memcmp(&reference.hi, digest + 8, 8), 0) << "length " << n;
  }
}

// 16 messages per call, lanes of different lengths with the same padded size (different
// padding per lane), every padded size up to five blocks: each digest equals the twin's.
TEST(CoreSha256, Avx512LanesMatchTheScalarTwin) {
  if (!sha256_avx512_available())
    GTEST_SKIP() << "this CPU has no AVX-512 (or PAGEDKV_SHA256/PAGEDKV_ISA turned it off)";
  std::mt19937_64 rng(13);
  for (size_t blocks = 1; blocks <= 5; ++blocks) {
    for (int round = 0; round < 20; ++round) {
      std::vector<std::vector<std::byte>> msgs;
      const std::byte* messages[kSha256WideLanes];
      std::byte* digests[kSha256WideLanes];
      std::array<std::array<std::byte, 32>, kSha256WideLanes> wide;
      for (int l = 0; l < kSha256WideLanes; ++l) {
        const size_t shortest = blocks == 1 ? 0 : (blocks - 1) * 64 - 8;  // lengths with this padded size
        const size_t len = shortest + rng() % (blocks * 64 - 8 - shortest);
        auto m = random_bytes(rng, blocks * 64);
        sha256_pad(m.data(), len);
        ASSERT_EQ(sha256_padded_size(len), blocks * 64);
        msgs.push_back(std::move(m));
      }
      for (int l = 0; l < kSha256WideLanes; ++l) {
        messages[l] = msgs[static_cast<size_t>(l)].data();
        digests[l] = wide[static_cast<size_t>(l)].data();
      }
      sha256_avx512_x16(messages, blocks, digests);
      for (int l = 0; l < kSha256WideLanes; ++l) {
        std::array<std::byte, 32> alone;
        sha256_scalar(msgs[static_cast<size_t>(l)].data(), blocks, alone.data());
        EXPECT_EQ(alone, wide[static_cast<size_t>(l)]) << blocks << " blocks, lane " << l;
      }
    }
  }
}

TEST(CoreSha256, EveryLengthMatchesOpenSsl) {
  std::mt19937_64 rng(7);
  for (size_t n = 0; n <= 300; ++n) {
    const auto bytes = random_bytes(rng, n);
    EXPECT_EQ(sha256_hash(bytes, 0), sha256_hash_openssl(bytes, 0)) << "length " << n;
  }
}

TEST(CoreSha256, LanesMatchOneLane) {
  if (!sha256_hardware_available()) GTEST_SKIP() << "this CPU has no SHA extensions";
  std::mt19937_64 rng(11);
  for (size_t len : {size_t{0}, size_t{20}, size_t{55}, size_t{80}, size_t{200}}) {
    const size_t padded = sha256_padded_size(len);
    std::vector<std::vector<std::byte>> msgs;
    for (int l = 0; l < kSha256MaxLanes; ++l) {
      auto m = random_bytes(rng, padded);
      sha256_pad(m.data(), len);
      msgs.push_back(std::move(m));
    }
    for (int lanes = 1; lanes <= kSha256MaxLanes; ++lanes) {
      std::vector<std::array<std::byte, 32>> together(static_cast<size_t>(lanes));
      const std::byte* messages[kSha256MaxLanes];
      std::byte* digests[kSha256MaxLanes];
      for (int l = 0; l < lanes; ++l) {
        messages[l] = msgs[static_cast<size_t>(l)].data();
        digests[l] = together[static_cast<size_t>(l)].data();
      }
      sha256_hardware_lanes(messages, lanes, padded / 64, digests);
      for (int l = 0; l < lanes; ++l) {
        std::array<std::byte, 32> alone;
        const std::byte* m[1] = {msgs[static_cast<size_t>(l)].data()};
        std::byte* d[1] = {alone.data()};
        sha256_hardware_lanes(m, 1, padded / 64, d);
        EXPECT_EQ(alone, together[static_cast<size_t>(l)]) << "length " << len << ", lanes " << lanes << ", lane " << l;
        const BlockHash reference =
            sha256_hash_openssl(std::span<const std::byte>(msgs[static_cast<size_t>(l)]).first(len), 0);
        EXPECT_EQ(std::memcmp(&reference.lo, alone.data(), 8), 0);
        EXPECT_EQ(std::memcmp(&reference.hi, alone.data() + 8, 8), 0);
      }
    }
  }
}

// XXH3-128 behind a function pointer of its own: the hasher cannot recognise it, so it hashes
// one block at a time through hash_block (the reference for the XXH3 lanes).
BlockHash xxh3_one_block_at_a_time(std::span<const std::byte> bytes, uint64_t seed) {
  return xxh3_128_hash(bytes, seed);
}

// Requests of many lengths (none, one, many blocks; partial tails), some already partly hashed,
// some with extra keys (hashed one by one): extend_many must give each exactly the hashes the
// one-block-at-a-time hasher gives it, block by block.
TEST(CoreSha256, InterleavedChainsMatchTheOneBlockAtATimeHasher) {
  std::mt19937_64 rng(3);
  const MultiModalInput image{BlockHash{0x1234, 0x5678}, 5, 40};
  for (HashAlgorithm algorithm : {HashAlgorithm::kSha256, HashAlgorithm::kXxh3_128})
    for (int block_size : {1, 3, 16, 17, 64}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{99}}) {
        SCOPED_TRACE(::testing::Message() << hash_algorithm_name(algorithm) << ", seed " << seed);
        const BlockHasher hasher(block_size, algorithm, seed);
        const BlockHasher reference(
            block_size, algorithm == HashAlgorithm::kSha256 ? &sha256_hash_openssl : &xxh3_one_block_at_a_time, seed);
        ASSERT_EQ(hasher.root(), reference.root());
        const int n = 71;  // more than the 16 AVX-512 lanes: lanes take new requests as they finish
        std::vector<std::vector<TokenId>> tokens(n);
        std::vector<PrefixKeys> keys(n);
        std::vector<std::vector<BlockHash>> hashes(n), expected_hashes(n);
        std::vector<std::vector<uint64_t>> digests(n), expected_digests(n);
        std::vector<BlockHashJob> jobs;
        for (size_t i = 0; i < tokens.size(); ++i) {
          const size_t len = i % 5 == 0 ? rng() % 3 : rng() % 300;
          for (size_t t = 0; t < len; ++t) tokens[i].push_back(static_cast<TokenId>(rng() % 32000));
          if (i % 7 == 3) keys[i].lora_id = 5;
          if (i % 7 == 4) keys[i].mm_inputs = std::span<const MultiModalInput>(&image, 1);
          if (i % 7 == 5) keys[i].cache_salt = "tenant";
          reference.extend(tokens[i], keys[i], expected_hashes[i], expected_digests[i]);
          if (i % 4 == 1 && tokens[i].size() >= 2 * static_cast<size_t>(block_size)) {  // already partly hashed
            const auto head = std::span<const TokenId>(tokens[i]).first(2 * static_cast<size_t>(block_size));
            reference.extend(head, keys[i], hashes[i], digests[i]);
          }
          jobs.push_back(BlockHashJob{tokens[i], keys[i], &hashes[i], &digests[i]});
        }
        hasher.extend_many(jobs);
        for (size_t i = 0; i < tokens.size(); ++i) {
          EXPECT_EQ(hashes[i], expected_hashes[i]) << "block size " << block_size << ", request " << i;
          EXPECT_EQ(digests[i], expected_digests[i]) << "block size " << block_size << ", request " << i;
          // One request at a time (extend), and growing token by token, give the same.
          std::vector<BlockHash> one;
          std::vector<uint64_t> one_digests;
          for (size_t t = 0; t <= tokens[i].size(); t += 1 + rng() % 40)
            hasher.extend(std::span<const TokenId>(tokens[i]).first(t), keys[i], one, one_digests);
          hasher.extend(tokens[i], keys[i], one, one_digests);
          EXPECT_EQ(one, expected_hashes[i]) << "block size " << block_size << ", request " << i;
        }
      }
    }
}

TEST(CoreSha256, ImplementationIsNamed) {
  EXPECT_EQ(BlockHasher(16, HashAlgorithm::kXxh3_128).implementation(), "xxh3_128");
  EXPECT_EQ(BlockHasher(16, HashAlgorithm::kSha256).implementation(), !sha256_hardware_available() ? "sha256 (OpenSSL)"
                                                                      : sha256_avx512_available()
                                                                          ? "sha256 (AVX-512 16 lanes, SHA extensions)"
                                                                          : "sha256 (SHA extensions)");
  EXPECT_EQ(BlockHasher(16, &sha256_hash_openssl, 0).implementation(), "custom");
}

}  // namespace
}  // namespace pagedkv
