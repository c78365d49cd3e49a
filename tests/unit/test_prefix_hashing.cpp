// Prefix hashing: the chained block hash, its documented byte format, extra keys, the two
// algorithms, and pinned test vectors.
//
// The pinned vectors below were computed once (with this code, then cross-checked against the
// byte format in block_hasher.h and the published XXH3/SHA-256 vectors) and hard-coded. They
// must NEVER change: block hashes key persistent and shared caches (disk tiers, router indexes,
// KV events consumed by other processes). A change here silently turns every stored entry into
// a miss, or worse, lets two versions disagree on what a hash means. If a format change is ever
// truly needed, it gets a new root tag ("pagedkv/root/v2") and new vectors beside these.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/manager/request.h"
#include "pagedkv/prefix/block_hasher.h"

namespace pagedkv {
namespace {

std::span<const std::byte> bytes_of(const char* s) { return {reinterpret_cast<const std::byte*>(s), std::strlen(s)}; }

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  std::byte b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the test machine is little-endian (static_assert in the hasher)
  out.insert(out.end(), b, b + sizeof(T));
}

// The vector tokens: 40 tokens, i * 1000 + 7 (two full blocks of 16 and a partial one).
std::vector<TokenId> vector_tokens() {
  std::vector<TokenId> t(40);
  for (int i = 0; i < 40; ++i) t[static_cast<size_t>(i)] = i * 1000 + 7;
  return t;
}

// ---- the primitives against published vectors ------------------------------------------------

TEST(CoreHashing, PrimitivesMatchPublishedVectors) {
  // XXH3-128 of the empty input, seed 0 (xxHash's own test vector).
  EXPECT_EQ(xxh3_128_hash({}, 0), (BlockHash{0x6001c324468d497full, 0x99aa06d3014798d8ull}));
  // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223...: lo = bytes 0..7 LE, hi = bytes 8..15 LE.
  EXPECT_EQ(sha256_hash(bytes_of("abc"), 0), (BlockHash{0xeacf018fbf1678baull, 0x2322ae5dde404141ull}));
  EXPECT_EQ(sha256_hash(bytes_of("abc"), 0).hex(), "2322ae5dde404141eacf018fbf1678ba");
  // XXH3 takes the seed; SHA-256 ignores it (the seed enters through the root instead).
  EXPECT_EQ(xxh3_128_hash(bytes_of("abc"), 0), (BlockHash{0x78af5f94892f3950ull, 0x06b05ab6733a6185ull}));
  EXPECT_EQ(xxh3_128_hash(bytes_of("abc"), 42), (BlockHash{0xd8438def21bbdcc3ull, 0x4bc24859f045e0b4ull}));
  EXPECT_EQ(sha256_hash(bytes_of("abc"), 42), sha256_hash(bytes_of("abc"), 0));
  EXPECT_EQ(extra_keys_digest({}), 0u);
  EXPECT_EQ(extra_keys_digest(bytes_of("abc")), 0x78af5f94892f3950ull);
}

// ---- pinned vectors (never change these: see the top of the file) ----------------------------

struct PinnedVector {
  HashAlgorithm algorithm;
  uint64_t seed;
  BlockHash root, b0, b1, x0, x1;  // b: no extra keys; x: LoRA 7, one image, salt "tenant-a"
};

const PinnedVector kPinned[] = {
    {HashAlgorithm::kXxh3_128,
     0,
     {0xaa02c50a7eca74dfull, 0xd2e93844f0612443ull},
     {0x46eb23752f216725ull, 0x94e88fff992cad01ull},
     {0xaff6a05b23af77e8ull, 0x362393aa6456bca2ull},
     {0xdd38ee4a6798babaull, 0x42bcc78bf3494997ull},
     {0xc3bbd3e0d5e4300dull, 0xa43a959fa6f89b15ull}},
    {HashAlgorithm::kXxh3_128,
     42,
     {0x7976ecaf366925c8ull, 0x550ce0a2bd7f66f8ull},
     {0xacc5653bcce71628ull, 0xebcccd998fd66fd4ull},
     {0xb42649a67afe6ee3ull, 0xf3a8b15647b117ebull},
     {0x7be400a7f66e0884ull, 0xb1049b18161a8a5full},
     {0xd7c9868ce429c15cull, 0xd0c0b1033df9d5fdull}},
    {HashAlgorithm::kSha256,
     0,
     {0xd67a71508cba0260ull, 0xa6491da66ae62862ull},
     {0xf5a47ddb3102b187ull, 0x10d74fecaa7c2a42ull},
     {0x6d77a0c91317ba71ull, 0xd0630c9672101c9eull},
     {0x61c237047ceb6206ull, 0xfeca7a59ed2cc1d3ull},
     {0x05f3becd947753c6ull, 0x86d8680df0eb00a2ull}},
    {HashAlgorithm::kSha256,
     42,
     {0xa2e158192b217fd9ull, 0x0af1d99cc93e4e28ull},
     {0x2ca0e0c72c0863deull, 0x152c734646cc061full},
     {0x26fe5209c5cd32edull, 0xbbaf5af4651ce12aull},
     {0xcf6e90d43cf7c8acull, 0xc8d69fba0205de58ull},
     {0x2cb1aa75ff5c470bull, 0xab7315aa3ad03811ull}},
};
// Extra-key digests of the "x" vectors (independent of algorithm and seed).
constexpr uint64_t kPinnedDigest0 = 0x8917e755a924a5cdull;
constexpr uint64_t kPinnedDigest1 = 0x33a8548db375a625ull;

const std::vector<MultiModalInput> kVectorImage{MultiModalInput{BlockHash{0x1111, 0x2222}, 10, 12}};  // tokens 10..21
PrefixKeys vector_keys() { return PrefixKeys{7, kVectorImage, "tenant-a"}; }

TEST(CoreHashing, PinnedVectorsNeverChange) {
  const auto tokens = vector_tokens();
  for (const PinnedVector& v : kPinned) {
    SCOPED_TRACE(std::string(hash_algorithm_name(v.algorithm)) + " seed " + std::to_string(v.seed));
    BlockHasher h(16, v.algorithm, v.seed);
    EXPECT_EQ(h.root(), v.root) << h.root().hex();
    std::vector<BlockHash> hashes;
    std::vector<uint64_t> digests;
    h.extend(tokens, PrefixKeys{}, hashes, digests);
    ASSERT_EQ(hashes.size(), 2u) << "the partial third block is never hashed";
    EXPECT_EQ(hashes[0], v.b0) << hashes[0].hex();
    EXPECT_EQ(hashes[1], v.b1) << hashes[1].hex();
    EXPECT_TRUE(digests.empty()) << "no extra keys: no digests (each is 0)";
    hashes.clear();
    digests.clear();
    h.extend(tokens, vector_keys(), hashes, digests);
    ASSERT_EQ(hashes.size(), 2u);
    EXPECT_EQ(hashes[0], v.x0) << hashes[0].hex();
    EXPECT_EQ(hashes[1], v.x1) << hashes[1].hex();
    EXPECT_EQ(digests, (std::vector<uint64_t>{kPinnedDigest0, kPinnedDigest1}));
  }
}

// Digests stop where the keys began: blocks hashed without extra keys read as digest 0 through
// Request::block_extra_digest, and extend pads them in once keys appear.
TEST(CoreHashing, DigestsArePaddedWhenKeysAppearLater) {
  const auto tokens = vector_tokens();
  BlockHasher h(16, HashAlgorithm::kXxh3_128, 0);
  std::vector<BlockHash> hashes;
  std::vector<uint64_t> digests;
  h.extend(std::span<const TokenId>(tokens).first(16), PrefixKeys{}, hashes, digests);
  ASSERT_EQ(hashes.size(), 1u);
  EXPECT_TRUE(digests.empty());
  h.extend(tokens, vector_keys(), hashes, digests);
  ASSERT_EQ(hashes.size(), 2u);
  ASSERT_EQ(digests.size(), 2u);
  EXPECT_EQ(digests[0], 0u);
  EXPECT_EQ(digests[1], kPinnedDigest1);
  Request r;
  r.block_extra_digests = {5};
  EXPECT_EQ(r.block_extra_digest(0), 5u);
  EXPECT_EQ(r.block_extra_digest(1), 0u);
}

// The documented byte format, rebuilt here by hand, gives the same hashes: the format in
// block_hasher.h / extra_keys.h is the contract, not an accident of the implementation.
TEST(CoreHashing, DocumentedByteFormatReproducesTheHashes) {
  const auto tokens = vector_tokens();
  for (const PinnedVector& v : kPinned) {
    SCOPED_TRACE(std::string(hash_algorithm_name(v.algorithm)) + " seed " + std::to_string(v.seed));
    const HashFunction fn = v.algorithm == HashAlgorithm::kSha256 ? &sha256_hash : &xxh3_128_hash;
    std::vector<std::byte> root_bytes;
    for (char c : std::string("pagedkv/root/v1")) root_bytes.push_back(static_cast<std::byte>(c));
    put<uint64_t>(root_bytes, v.seed);
    const BlockHash root = fn(root_bytes, v.seed);
    EXPECT_EQ(root, v.root);

    auto block_bytes = [&](const BlockHash& parent, int block) {
      std::vector<std::byte> b;
      put<uint64_t>(b, parent.lo);
      put<uint64_t>(b, parent.hi);
      for (int i = 0; i < 16; ++i) put<int32_t>(b, tokens[static_cast<size_t>(block * 16 + i)]);
      return b;
    };
    const BlockHash b0 = fn(block_bytes(root, 0), v.seed);
    EXPECT_EQ(b0, v.b0);
    EXPECT_EQ(fn(block_bytes(b0, 1), v.seed), v.b1);

    // Block 0 with extras: 'L' lora, 'M' the image (overlaps tokens 10..15), 'S' the salt.
    std::vector<std::byte> e0;
    e0.push_back(std::byte{'L'});
    put<uint64_t>(e0, 7);
    e0.push_back(std::byte{'M'});
    put<uint64_t>(e0, 0x1111);
    put<uint64_t>(e0, 0x2222);
    put<int32_t>(e0, 10);
    e0.push_back(std::byte{'S'});
    put<uint32_t>(e0, 8);
    for (char c : std::string("tenant-a")) e0.push_back(static_cast<std::byte>(c));
    auto x0_bytes = block_bytes(root, 0);
    x0_bytes.insert(x0_bytes.end(), e0.begin(), e0.end());
    const BlockHash x0 = fn(x0_bytes, v.seed);
    EXPECT_EQ(x0, v.x0);
    EXPECT_EQ(extra_keys_digest(e0), kPinnedDigest0);
    // Block 1: the image still overlaps (tokens 16..21); no salt after block 0.
    std::vector<std::byte> e1;
    e1.push_back(std::byte{'L'});
    put<uint64_t>(e1, 7);
    e1.push_back(std::byte{'M'});
    put<uint64_t>(e1, 0x1111);
    put<uint64_t>(e1, 0x2222);
    put<int32_t>(e1, 10);
    auto x1_bytes = block_bytes(x0, 1);
    x1_bytes.insert(x1_bytes.end(), e1.begin(), e1.end());
    EXPECT_EQ(fn(x1_bytes, v.seed), v.x1);
    EXPECT_EQ(extra_keys_digest(e1), kPinnedDigest1);

    // And append_extra_keys writes exactly those bytes.
    std::vector<std::byte> got0, got1;
    append_extra_keys(vector_keys(), 0, 16, got0);
    append_extra_keys(vector_keys(), 1, 16, got1);
    EXPECT_EQ(got0, e0);
    EXPECT_EQ(got1, e1);
  }
}

// ---- properties ------------------------------------------------------------------------------

TEST(CoreHashing, HashersWithTheSameConfigurationAgree) {
  const auto tokens = vector_tokens();
  for (auto alg : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256}) {
    BlockHasher a(16, alg, 99), b(16, alg, 99);
    std::vector<BlockHash> ha, hb;
    std::vector<uint64_t> da, db;
    a.extend(tokens, PrefixKeys{}, ha, da);
    b.extend(tokens, PrefixKeys{}, hb, db);
    EXPECT_EQ(ha, hb);
    EXPECT_EQ(a.algorithm(), alg);
    EXPECT_EQ(a.seed(), 99u);
    EXPECT_EQ(a.block_size(), 16);
  }
}

TEST(CoreHashing, SeedAndAlgorithmChangeEveryHash) {
  const auto tokens = vector_tokens();
  std::vector<std::vector<BlockHash>> all;
  for (auto alg : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256})
    for (uint64_t seed : {0ull, 1ull}) {
      BlockHasher h(16, alg, seed);
      std::vector<BlockHash> hs;
      std::vector<uint64_t> ds;
      h.extend(tokens, PrefixKeys{}, hs, ds);
      all.push_back(hs);
    }
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j) {
      EXPECT_NE(all[i][0], all[j][0]) << i << " vs " << j;
      EXPECT_NE(all[i][1], all[j][1]) << i << " vs " << j;
    }
}

TEST(CoreHashing, TheChainMakesEqualBlocksAtDifferentPositionsDifferent) {
  BlockHasher h(4);
  // Blocks: [1 2 3 4] [1 2 3 4] [9 9 9 9]  vs  [5 5 5 5] [1 2 3 4] [9 9 9 9]
  std::vector<TokenId> a{1, 2, 3, 4, 1, 2, 3, 4, 9, 9, 9, 9};
  std::vector<TokenId> b{5, 5, 5, 5, 1, 2, 3, 4, 9, 9, 9, 9};
  std::vector<BlockHash> ha, hb;
  std::vector<uint64_t> da, db;
  h.extend(a, PrefixKeys{}, ha, da);
  h.extend(b, PrefixKeys{}, hb, db);
  EXPECT_NE(ha[0], ha[1]) << "same tokens, different parent";
  EXPECT_NE(ha[1], hb[1]) << "same tokens at the same position after a different prefix";
  EXPECT_NE(ha[2], hb[2]) << "a difference early changes every later hash";
  EXPECT_EQ(ha[0], h.hash_block(h.root(), std::span<const TokenId>(a).subspan(0, 4), {}));
  EXPECT_EQ(ha[1], h.hash_block(ha[0], std::span<const TokenId>(a).subspan(4, 4), {}));
}

TEST(CoreHashing, ExtendIsIncrementalAndSkipsThePartialBlock) {
  BlockHasher h(4);
  std::vector<TokenId> t{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<BlockHash> once, step;
  std::vector<uint64_t> d1, d2;
  h.extend(t, PrefixKeys{}, once, d1);
  EXPECT_EQ(once.size(), 2u);
  // Token by token, as decode appends them: the same hashes, each computed once.
  std::vector<TokenId> growing;
  for (TokenId x : t) {
    growing.push_back(x);
    h.extend(growing, PrefixKeys{}, step, d2);
    EXPECT_EQ(step.size(), growing.size() / 4);
  }
  EXPECT_EQ(step, once);
  EXPECT_EQ(d2, d1);
  // Nothing new: nothing changes.
  h.extend(t, PrefixKeys{}, step, d2);
  EXPECT_EQ(step.size(), 2u);
}

TEST(CoreHashing, ExtraKeysSeparateOtherwiseEqualBlocks) {
  BlockHasher h(4);
  const std::vector<TokenId> t{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto hashes = [&](const PrefixKeys& k) {
    std::vector<BlockHash> hs;
    std::vector<uint64_t> ds;
    h.extend(t, k, hs, ds);
    return hs;
  };
  const auto plain = hashes(PrefixKeys{});
  // LoRA: every block differs (the adapter changes every token's KV).
  const auto lora1 = hashes(PrefixKeys{1, {}, {}});
  const auto lora2 = hashes(PrefixKeys{2, {}, {}});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NE(plain[i], lora1[i]);
    EXPECT_NE(lora1[i], lora2[i]);
  }
  // Salt: mixed into block 0 only, but the chain carries it to every block.
  const auto salt_a = hashes(PrefixKeys{0, {}, "a"});
  const auto salt_b = hashes(PrefixKeys{0, {}, "b"});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NE(plain[i], salt_a[i]);
    EXPECT_NE(salt_a[i], salt_b[i]);
  }
  std::vector<std::byte> e1;
  append_extra_keys(PrefixKeys{0, {}, "a"}, 1, 4, e1);
  EXPECT_TRUE(e1.empty()) << "the salt is serialized into block 0 only";
  // Multimodal: an image over tokens 5..6 (block 1) changes block 1 and, through the chain,
  // block 2, but not block 0.
  const std::vector<MultiModalInput> img_x{MultiModalInput{BlockHash{1, 1}, 5, 2}};
  const std::vector<MultiModalInput> img_y{MultiModalInput{BlockHash{2, 2}, 5, 2}};
  const std::vector<MultiModalInput> img_x_later{MultiModalInput{BlockHash{1, 1}, 6, 2}};
  const auto with_x = hashes(PrefixKeys{0, img_x, {}});
  const auto with_y = hashes(PrefixKeys{0, img_y, {}});
  const auto with_x_later = hashes(PrefixKeys{0, img_x_later, {}});
  EXPECT_EQ(with_x[0], plain[0]);
  EXPECT_NE(with_x[1], plain[1]);
  EXPECT_NE(with_x[1], with_y[1]) << "a different image is a different block";
  EXPECT_NE(with_x[1], with_x_later[1]) << "the same image at another offset is a different block";
  EXPECT_NE(with_x[2], plain[2]);
}

TEST(CoreHashing, MultimodalInputsAreSerializedForEveryBlockTheyOverlap) {
  // Two inputs: tokens 2..9 (blocks 0, 1, 2 at block size 4) and 12..13 (block 3).
  const std::vector<MultiModalInput> mm{MultiModalInput{BlockHash{1, 2}, 2, 8},
                                        MultiModalInput{BlockHash{3, 4}, 12, 2}};
  const PrefixKeys keys{0, mm, {}};
  auto tags = [&](int block) {
    std::vector<std::byte> out;
    append_extra_keys(keys, block, 4, out);
    return out.size() / (1 + 8 + 8 + 4);  // one 'M' record per overlapping input
  };
  EXPECT_EQ(tags(0), 1u);
  EXPECT_EQ(tags(1), 1u);
  EXPECT_EQ(tags(2), 1u);
  EXPECT_EQ(tags(3), 1u);
  EXPECT_EQ(tags(4), 0u);
  std::vector<std::byte> b2, b3;
  append_extra_keys(keys, 2, 4, b2);
  append_extra_keys(keys, 3, 4, b3);
  EXPECT_NE(b2, b3) << "blocks 2 and 3 carry different inputs";
}

TEST(CoreHashing, AlgorithmNamesParse) {
  EXPECT_EQ(parse_hash_algorithm("xxh3_128"), HashAlgorithm::kXxh3_128);
  EXPECT_EQ(parse_hash_algorithm("xxh3"), HashAlgorithm::kXxh3_128);
  EXPECT_EQ(parse_hash_algorithm("sha256"), HashAlgorithm::kSha256);
  EXPECT_EQ(parse_hash_algorithm("sha-256"), HashAlgorithm::kSha256);
  EXPECT_FALSE(parse_hash_algorithm("md5").has_value());
  EXPECT_EQ(hash_algorithm_name(HashAlgorithm::kSha256), "sha256");
  EXPECT_EQ(hash_algorithm_name(HashAlgorithm::kXxh3_128), "xxh3_128");
}

TEST(CoreHashing, RejectsNonPositiveBlockSize) {
  EXPECT_THROW(BlockHasher(0), ConfigError);
  EXPECT_THROW(BlockHasher(-16, HashAlgorithm::kSha256, 0), ConfigError);
}

TEST(CoreHashing, HexIsHiThenLo) { EXPECT_EQ((BlockHash{0x1, 0xabcdef}).hex(), "0000000000abcdef0000000000000001"); }

}  // namespace
}  // namespace pagedkv
