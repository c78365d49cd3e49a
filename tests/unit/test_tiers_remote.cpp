// The remote tier on an in-memory store shared by several caches (as processes share one Redis):
// the value format and its verification, a prefix computed by one cache loaded byte for byte by
// another, tenants (cache_salt) and models (fingerprint) kept apart, duplicates not rewritten,
// and the faults: store down, back, slow, full, corrupt or truncated values, values of another
// fingerprint. The all-tier checker runs after every operation; the engine test runs the
// stories260K goldens through two engines sharing the store.
#include <gtest/gtest.h>

#include <chrono>

#include "fake_remote_store.h"
#include "golden_engine_test.h"
#include "pagedkv/engine/llama2c_run_request.h"
#include "pagedkv/storage/cpu_isa.h"
#include "pagedkv/tiers/remote_value_copy.h"
#include "pagedkv/tiers/remote_value_format.h"
#include "tiers_test_support.h"

namespace pagedkv {
namespace {

using namespace pagedkv::testing;
using PrefixState = TieredKVCache::PrefixState;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kModel = 0xabcdef;

TierConfig remote_only(std::shared_ptr<FakeRemoteBackend> b, bool write_through = true) {
  TierConfig c;
  c.remote_store = fake_remote(std::move(b));
  c.remote_description = "fake";
  c.remote_write_through = write_through;
  c.remote_probe_wait = std::chrono::milliseconds(2000);  // generous: sanitizer builds are slow
  c.log_degraded = false;
  return c;
}

// Computes `r` on `d` and lets write-through hand its blocks to the remote tier's store lane.
void compute_and_store(Device& d, TieredKVCache& t, Request& r) {
  compute_and_free(d, r, &t);
  t.on_step_begin();  // write-through queues the newly cached blocks
  t.before_forward();  // the memory lane packs them
  check_all(d, t);
}

TierHitTokens remote_hit(int tokens) {
  TierHitTokens t;
  t.remote = tokens;
  return t;
}

// ---- the value format ---------------------------------------------------------------------------

struct FormatFixture {
  KVArena arena{small_spec(), kLayers, 2};
  BlockHash fingerprint{11, 22};
  StoredBlockKey key;
  std::vector<std::byte> value;
  FormatFixture() {
    key.hash = BlockHash{1, 2};
    key.parent = BlockHash{3, 4};
    key.extra_digest = 5;
    key.tokens = {7, 8, 9, 10};
    fill_block(arena, BlockId{1}, key.hash);
    const size_t header = remote_value_header_bytes(4);
    value.resize(remote_value_bytes(4, block_payload_bytes(arena)));
    gather_block(arena, 1, value.data() + header);
    encode_remote_value_header(key, fingerprint, block_payload_bytes(arena), value);
  }
  RemoteValueStatus verify(std::span<const std::byte> v, const BlockHash& fp, const StoredBlockKey& k) const {
    std::span<const std::byte> payload;
    return verify_remote_value(v, fp, k, block_payload_bytes(arena), payload);
  }
};

TEST(RemoteValueFormat, KeysAreStableAcrossProcesses) {
  // A golden: another process (or machine) must build exactly this key for this block.
  EXPECT_EQ(remote_block_key("pagedkv", BlockHash{1, 2}, BlockHash{0xabc, 0xdef}),
            "pagedkv:00000000000000020000000000000001:0000000000000def0000000000000abc");
}

TEST(RemoteValueFormat, RoundTripAndEveryCorruptionIsRejected) {
  FormatFixture f;
  std::span<const std::byte> payload;
  ASSERT_EQ(verify_remote_value(f.value, f.fingerprint, f.key, block_payload_bytes(f.arena), payload),
            RemoteValueStatus::kOk);
  KVArena out(small_spec(), kLayers, 1);
  scatter_block(payload.data(), out, 0);
  EXPECT_TRUE(block_holds(out, BlockId{0}, f.key.hash));
  // Truncated or extended anywhere.
  for (size_t n = 0; n < f.value.size(); n += 7)
    EXPECT_EQ(f.verify(std::span(f.value).first(n), f.fingerprint, f.key), RemoteValueStatus::kTruncated) << n;
  auto longer = f.value;
  longer.push_back(std::byte{0});
  EXPECT_EQ(f.verify(longer, f.fingerprint, f.key), RemoteValueStatus::kTruncated);
  // Any flipped byte: header or payload.
  for (size_t i = 0; i < f.value.size(); i += (i < 200 ? 1 : 13)) {
    auto bad = f.value;
    bad[i] ^= std::byte{0x40};
    EXPECT_NE(f.verify(bad, f.fingerprint, f.key), RemoteValueStatus::kOk) << "byte " << i;
  }
  // Another model/layout, another block's tokens or parent, another tenant's extra keys.
  EXPECT_EQ(f.verify(f.value, BlockHash{11, 23}, f.key), RemoteValueStatus::kFingerprintMismatch);
  for (int which = 0; which < 3; ++which) {
    StoredBlockKey other = f.key;
    if (which == 0) other.tokens[2] = 99;
    if (which == 1) other.parent.lo ^= 1;
    if (which == 2) other.extra_digest ^= 1;
    EXPECT_EQ(f.verify(f.value, f.fingerprint, other), RemoteValueStatus::kKeyMismatch) << which;
  }
}

TEST(RemoteValueFormat, PackAndLoadInOnePassMatchTheTwoPassForms) {
  FormatFixture f;
  // pack_remote_value writes exactly the value gather_block + encode_remote_value_header write.
  std::vector<std::byte> packed(f.value.size(), std::byte{0x5a});
  pack_remote_value(f.arena, 1, f.key, f.fingerprint, packed);
  EXPECT_EQ(packed, f.value);
  EXPECT_THROW(pack_remote_value(f.arena, 1, f.key, f.fingerprint, std::span(packed).first(packed.size() - 1)),
               UsageError);
  packed.push_back(std::byte{0});
  EXPECT_THROW(pack_remote_value(f.arena, 1, f.key, f.fingerprint, packed), UsageError);
  // load_remote_value: the block byte for byte, and the same verdict as verify_remote_value.
  KVArena out(small_spec(), kLayers, 2);
  ASSERT_EQ(load_remote_value(f.value, f.fingerprint, f.key, out, 1), RemoteValueStatus::kOk);
  EXPECT_TRUE(block_holds(out, BlockId{1}, f.key.hash));
  for (size_t i = 0; i < f.value.size(); i += (i < 200 ? 1 : 13)) {
    auto bad = f.value;
    bad[i] ^= std::byte{0x40};
    fill_block(out, BlockId{0}, BlockHash{77, 77});
    const RemoteValueStatus st = load_remote_value(bad, f.fingerprint, f.key, out, 0);
    EXPECT_NE(st, RemoteValueStatus::kOk) << "byte " << i;
    EXPECT_EQ(st, f.verify(bad, f.fingerprint, f.key)) << "byte " << i;
    // A value refused before its payload (header, key) leaves the block as it was.
    if (st != RemoteValueStatus::kBadPayload) {
      EXPECT_TRUE(block_holds(out, BlockId{0}, BlockHash{77, 77})) << i;
    }
  }
  EXPECT_EQ(load_remote_value(std::span(f.value).first(f.value.size() - 1), f.fingerprint, f.key, out, 0),
            RemoteValueStatus::kTruncated);
  EXPECT_EQ(load_remote_value(f.value, BlockHash{11, 23}, f.key, out, 0), RemoteValueStatus::kFingerprintMismatch);
  EXPECT_THROW(load_remote_value(f.value, f.fingerprint, f.key, out, 2), UsageError);
}

TEST(RemoteValueCopy, OnePassCopiesAndChecksumsAsGatherScatterAndPayloadChecksum) {
  // Pages below, at and above the copy's 8 KiB pieces, and not multiples of them.
  for (const auto& [heads, dim] : {std::pair{1, 2}, std::pair{2, 8}, std::pair{8, 64}, std::pair{3, 131}}) {
    KVCacheSpec spec = small_spec(16);
    spec.num_kv_heads = heads;
    spec.head_dim = dim;
    KVArena a(spec, 3, 4), b(spec, 3, 4);
    fill_block(a, BlockId{2}, BlockHash{static_cast<uint64_t>(heads), static_cast<uint64_t>(dim)});
    const size_t bytes = block_payload_bytes(a);
    std::vector<std::byte> want(bytes), got(bytes);
    gather_block(a, 2, want.data());
    EXPECT_EQ(gather_block_checksummed(a, 2, got.data()), payload_checksum(want)) << heads << "x" << dim;
    EXPECT_EQ(got, want);
    EXPECT_EQ(scatter_block_checksummed(got.data(), b, 3), payload_checksum(want));
    EXPECT_TRUE(block_holds(b, BlockId{3}, BlockHash{static_cast<uint64_t>(heads), static_cast<uint64_t>(dim)}));
    EXPECT_THROW(gather_block_checksummed(a, 4, got.data()), UsageError);
    EXPECT_THROW(scatter_block_checksummed(got.data(), b, -1), UsageError);
  }
}

TEST(RemoteValueCopy, Avx2AndPortableKernelsAgreeOnEverySplit) {
  const std::vector<std::byte> src = payload_for(BlockHash{5, 6}, 40000);
  // Pieces of sizes around XXH3's 16-, 128-, 240-byte and 1 KiB stripe boundaries and the 8 KiB
  // chunk, and around the AVX2 build's shortest streamed piece (256 bytes), most of them starting
  // off its 32-byte stores' alignment.
  const std::vector<std::vector<size_t>> splits = {{0},
                                                   {1},
                                                   {16, 17},
                                                   {128, 129, 240, 241},
                                                   {1023, 1025},
                                                   {8192},
                                                   {8193, 3, 8191},
                                                   {40000},
                                                   {7, 0, 39993},
                                                   {255, 256, 257, 31, 2049, 33, 4099},
                                                   {5, 288, 1, 319, 2, 4096}};
  for (const std::vector<size_t>& sizes : splits) {
    std::vector<ChecksummedPiece> pieces;
    std::vector<std::byte> a(40000), b(40000);
    size_t at = 0;
    for (size_t n : sizes) {
      pieces.push_back(ChecksummedPiece{src.data() + at, a.data() + at, n});
      at += n;
    }
    const uint64_t want = payload_checksum(std::span(src).first(at));
    EXPECT_EQ(tiers_detail::copy_checksummed_portable(pieces), want) << at;
    EXPECT_TRUE(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(at), src.begin()));
    if (!has_avx2(best_available_isa())) continue;
    for (ChecksummedPiece& p : pieces) p.to = b.data() + (p.to - a.data());
    for (tiers_detail::CopyWrites writes :
         {tiers_detail::CopyWrites::kThroughCache, tiers_detail::CopyWrites::kStreaming}) {
      std::fill(b.begin(), b.end(), std::byte{0});
      EXPECT_EQ(tiers_detail::copy_checksummed_avx2(pieces, writes), want) << at;
      EXPECT_TRUE(std::equal(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(at), src.begin()));
    }
  }
}

// ---- sharing ----------------------------------------------------------------------------------

TEST(RemoteTier, PrefixComputedByOneCacheIsLoadedByAnotherByteForByte) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel);
  Request a = make_request(1, 17, 0);  // 4 full blocks + 1 token
  compute_and_store(da, ta, a);
  ASSERT_TRUE(eventually([&] { return store->size() == 4; }));
  Request again = make_request(2, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, again), remote_hit(16));
  const RemoteTierStats s = tb.remote()->stats();
  EXPECT_EQ(s.loaded_blocks, 4u);
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.corrupt_blocks, 0u);
  // On B's device now: the next lookup is a device hit, and B does not store them again.
  tb.on_step_begin();
  tb.before_forward();
  Request third = make_request(3, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, third), (TierHitTokens{16, 0, 0, 0}));
  ta.drain();
  tb.drain();
  EXPECT_EQ(store->sets.load(), 4u);
  check_all(db, tb);
}

TEST(RemoteTier, EvictionOnlyPolicyStoresBlocksWhenTheDeviceDropsThem) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9);
  TieredKVCache ta(remote_only(store, /*write_through=*/false), da.manager, da.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_store(da, ta, a);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(store->size(), 0u);  // still cached on the device
  const int usable_tokens = da.manager.pool().num_usable_blocks() * da.manager.block_size();
  Request f = make_request(2, usable_tokens, 100000);
  compute_and_free(da, f, &ta);
  ta.before_forward();
  check_all(da, ta);
  EXPECT_TRUE(eventually([&] { return store->size() == 4; }));
  Device db(9);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel);
  Request again = make_request(3, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, again), remote_hit(16));
}

TEST(RemoteTier, TenantsWithAnotherSaltNeverShareAKey) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel);
  Request a = make_request(1, 17, 0);
  a.cache_salt = "tenant-a";
  compute_and_store(da, ta, a);
  ASSERT_TRUE(eventually([&] { return store->size() == 4; }));
  Request other = make_request(2, 17, 0);
  other.cache_salt = "tenant-b";
  EXPECT_EQ(admit_and_verify(db, tb, other).total(), 0);
  Request unsalted = make_request(3, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, unsalted).total(), 0);
  Request same = make_request(4, 17, 0);
  same.cache_salt = "tenant-a";
  EXPECT_EQ(admit_and_verify(db, tb, same), remote_hit(16));
}

TEST(RemoteTier, AnotherModelNeverUsesTheBlocksEvenUnderItsOwnKeys) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel + 1);
  Request a = make_request(1, 17, 0);
  compute_and_store(da, ta, a);
  ASSERT_TRUE(eventually([&] { return store->size() == 4; }));
  Request again = make_request(2, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, again).total(), 0);  // its keys name its own fingerprint
  // Copy A's values under B's keys (a misconfigured or hostile writer): verified, never used.
  for (const std::string& k : store->keys()) {
    const std::string block = k.substr(k.rfind(':') + 1);
    store->put(tb.remote()->key_of(BlockHash{std::stoull(block.substr(16), nullptr, 16),
                                             std::stoull(block.substr(0, 16), nullptr, 16)}),
               store->value(k));
  }
  Device dc(9);  // a fresh cache of B's model (B's own device now holds the blocks it computed)
  TieredKVCache tc(remote_only(store), dc.manager, dc.arena, kModel + 1);
  Request third = make_request(3, 17, 0);
  EXPECT_EQ(admit_and_verify(dc, tc, third).total(), 0);
  EXPECT_EQ(tc.remote()->stats().hits, 4u);  // present under its keys...
  EXPECT_EQ(tc.remote()->stats().fingerprint_mismatches, 4u);  // ...and refused, every one
}

// ---- faults -----------------------------------------------------------------------------------

TEST(RemoteTier, CorruptAndTruncatedValuesAreCountedMisses) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_store(da, ta, a);
  ASSERT_TRUE(eventually([&] { return store->size() == 4; }));
  Request probe = make_request(2, 17, 0);
  db.manager.hash_request(probe);
  // Block 2's payload loses a bit: blocks 0 and 1 still come from the remote tier.
  const std::string k2 = tb.remote()->key_of(probe.block_hashes[2]);
  auto v = store->value(k2);
  v[v.size() - 5] ^= std::byte{1};
  store->put(k2, v);
  Request again = make_request(3, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, again), remote_hit(8));
  EXPECT_EQ(tb.remote()->stats().corrupt_blocks, 1u);
  // A truncated block 1 (a fresh cache: B's device now holds 0 and 1).
  Device dc(9);
  TieredKVCache tc(remote_only(store), dc.manager, dc.arena, kModel);
  const std::string k1 = tc.remote()->key_of(probe.block_hashes[1]);
  auto v1 = store->value(k1);
  v1.resize(v1.size() / 2);
  store->put(k1, v1);
  Request fourth = make_request(4, 17, 0);
  EXPECT_EQ(admit_and_verify(dc, tc, fourth), remote_hit(4));
  EXPECT_EQ(tc.remote()->stats().corrupt_blocks, 2u);  // block 1 truncated, block 2 still corrupt
}

TEST(RemoteTier, StoreDownAtStartThenBackDegradesAndRecovers) {
  auto store = std::make_shared<FakeRemoteBackend>();
  store->down = true;
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_store(da, ta, a);  // the stores fail: dropped, the link marked down
  EXPECT_TRUE(eventually([&] { return ta.remote()->degraded(); }));
  Request b1 = make_request(2, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, b1).total(), 0);  // served without the tier
  EXPECT_TRUE(tb.remote()->degraded());
  EXPECT_GE(tb.remote()->stats().breaker_trips, 1u);
  EXPECT_EQ(store->size(), 0u);
  // Back: once the back-off has passed, A's next blocks are stored (those computed while the
  // store was down were dropped), and B, probing again, hits them.
  store->down = false;
  TokenId first = -1;
  for (int i = 0; i < 200 && first < 0; ++i) {
    Request r = make_request(10 + i, 17, 5000 + 100 * i);
    compute_and_store(da, ta, r);
    // This request's own four blocks, not just any four: an earlier request's stores may land
    // late (a slow sanitizer build) while this one's were dropped.
    auto stored = [&] {
      for (int b = 0; b < 4; ++b)
        if (store->value(ta.remote()->key_of(r.block_hashes[static_cast<size_t>(b)])).empty()) return false;
      return true;
    };
    if (eventually(stored, std::chrono::milliseconds(50))) first = 5000 + 100 * i;
  }
  ASSERT_GE(first, 0);
  EXPECT_FALSE(ta.remote()->degraded());
  ASSERT_TRUE(eventually([&] { return tb.remote()->available(); }));
  Request b2 = make_request(300, 17, first);
  EXPECT_EQ(admit_and_verify(db, tb, b2), remote_hit(16));
  EXPECT_FALSE(tb.remote()->degraded());
}

TEST(RemoteTier, KilledMidRunTheCacheKeepsServingAndLoadsAreMisses) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_store(da, ta, a);
  ASSERT_TRUE(eventually([&] { return store->size() == 4; }));
  store->down = true;  // between B's probe and its loads would be the worst moment; any moment is a miss
  Request again = make_request(2, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, again).total(), 0);
  EXPECT_TRUE(tb.remote()->degraded());
  check_all(db, tb);
}

TEST(RemoteTier, SlowStoreNeverHoldsARequestPastTheProbeDeadline) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TierConfig slow = remote_only(store);
  slow.remote_probe_wait = std::chrono::milliseconds(20);
  TieredKVCache tb(slow, db.manager, db.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_store(da, ta, a);
  ASSERT_TRUE(eventually([&] { return store->size() == 4; }));
  store->delay_ms = 1500;
  Request again = make_request(2, 17, 0);
  const auto start = Clock::now();
  EXPECT_EQ(admit_and_verify(db, tb, again).total(), 0);  // computed, not waited for
  // A correctness bound (the deadline is honoured), far above the 20 ms deadline.
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1000));
  store->delay_ms = 0;
}

TEST(RemoteTier, FullStoreRefusesWritesWhileReadsGoOn) {
  auto store = std::make_shared<FakeRemoteBackend>();
  Device da(9), db(9);
  TieredKVCache ta(remote_only(store), da.manager, da.arena, kModel);
  TieredKVCache tb(remote_only(store), db.manager, db.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_store(da, ta, a);
  ASSERT_TRUE(eventually([&] { return store->size() == 4; }));
  store->full = true;
  Request other = make_request(2, 17, 7000);
  compute_and_store(da, ta, other);
  ASSERT_TRUE(eventually([&] { return ta.remote()->stats().store_full_refusals > 0; }));
  EXPECT_TRUE(ta.remote()->degraded());
  EXPECT_EQ(store->size(), 4u);
  Request again = make_request(3, 17, 0);
  EXPECT_EQ(admit_and_verify(db, tb, again), remote_hit(16));  // reads unaffected
}

TEST(RemoteTier, BoundedStoreBacklogDropsInsteadOfBlocking) {
  auto store = std::make_shared<FakeRemoteBackend>();
  store->delay_ms = 50;
  Device da(33);
  TierConfig c = remote_only(store);
  c.remote_max_queued_bytes = 1;  // room for one value
  TieredKVCache ta(c, da.manager, da.arena, kModel);
  Request a = make_request(1, 16 * 4 + 1, 0);  // 16 blocks at once
  compute_and_store(da, ta, a);
  ta.drain();
  EXPECT_TRUE(eventually([&] {
    const RemoteTierStats s = ta.remote()->stats();
    return s.stored_blocks + s.dropped == 16;
  }));
  EXPECT_GT(ta.remote()->stats().dropped, 0u);
  store->delay_ms = 0;
  check_all(da, ta);
}

// ---- the engine: stories260K goldens through two engines sharing one store ----------------------

class RemoteEngine : public GoldenEngineTest {
 protected:
  static RequestOutput run_one(LLMEngine& engine, const GenerationRequest& r) {
    engine.add_request(r);
    auto outs = engine.run_to_completion();
    EXPECT_EQ(outs.size(), 1u);
    return outs.empty() ? RequestOutput{} : outs.front();
  }
};

TEST_F(RemoteEngine, GoldenPrefixComputedByOneEngineIsARemoteHitOnAnother) {
  auto store = std::make_shared<FakeRemoteBackend>();
  EngineConfig cfg;
  cfg.tiers = remote_only(store);
  cfg.check_invariants = true;
  const auto& golden = goldens_[2];
  const GenerationRequest prompt =
      llama2c_run_request({golden.ids.begin(), golden.ids.begin() + 100}, golden.steps, greedy());
  LLMEngine a(*model_, cfg);
  LLMEngine b(*model_, cfg);
  const RequestOutput first = run_one(a, prompt);
  EXPECT_EQ(full_ids(first), golden.ids);
  ASSERT_TRUE(eventually([&] { return store->size() >= 6; }));
  const RequestOutput second = run_one(b, prompt);
  EXPECT_EQ(full_ids(second), golden.ids);
  EXPECT_EQ(second.prefix_hit_tokens, 96);
  EXPECT_EQ(second.hit_tokens_by_tier, remote_hit(96));
  // The store dies: both keep serving the goldens, from their own devices or by recomputing.
  store->down = true;
  LLMEngine c(*model_, cfg);
  const RequestOutput third = run_one(c, prompt);
  EXPECT_EQ(full_ids(third), golden.ids);
  EXPECT_EQ(third.hit_tokens_by_tier.remote, 0);
  EXPECT_EQ(full_ids(run_one(a, prompt)), golden.ids);
  a.check_invariants();
  b.check_invariants();
  c.check_invariants();
}

}  // namespace
}  // namespace pagedkv
