// TieredKVCache on a real manager and device arena: evicted prefixes offloaded and promoted back
// byte for byte (host, disk, after a restart), hit accounting by tier, swap out/in through host
// and disk, corrupt or unusable disks, and the all-tier invariant checker after every operation.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include "pagedkv/core/error.h"
#include "tiers_test_support.h"

namespace pagedkv {
namespace {

using namespace pagedkv::testing;
using PrefixState = TieredKVCache::PrefixState;
using SwapInState = TieredKVCache::SwapInState;

constexpr uint64_t kModel = 0xabcdef;

TierConfig host_only(int blocks) {
  TierConfig c;
  c.host_cache_bytes = static_cast<size_t>(blocks) * block_payload_bytes(KVArena(small_spec(), kLayers, 1));
  c.log_degraded = false;
  return c;
}

TierConfig disk_only(const std::string& dir, int blocks) {
  TierConfig c;
  c.disk_cache_dir = dir;
  const size_t slot =
      disk_header_bytes(4) + round_up_to(block_payload_bytes(KVArena(small_spec(), kLayers, 1)), kDiskAlignment);
  c.disk_cache_bytes = static_cast<size_t>(blocks) * slot;
  c.log_degraded = false;
  return c;
}

// Starts the swap-in of `id` and polls (as the scheduler does between steps) until it settles.
SwapInState swap_in_and_wait(TieredKVCache& t, RequestId id, int first_block, std::span<const BlockId> dst) {
  SwapInState s = t.start_swap_in(id, first_block, dst);
  for (int i = 0; i < 5000 && s == SwapInState::kLoading; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s = t.poll_swap_in(id);
  }
  return s;
}

// Pushes request `r`'s cached blocks out of the device pool by running `fillers` distinct
// requests that need every block.
void evict_everything(Device& d, TieredKVCache& t, uint64_t first_id) {
  const int usable_tokens = d.manager.pool().num_usable_blocks() * d.manager.block_size();
  Request f = make_request(first_id, usable_tokens, 100000 + static_cast<TokenId>(first_id) * 1000);
  compute_and_free(d, f, &t);
  t.before_forward();  // the offload copies run before the evicted blocks are overwritten
  check_all(d, t);
}

TEST(TieredCache, EvictedPrefixComesBackFromTheHostTierByteForByte) {
  Device d(9);  // 8 usable blocks of 4 tokens
  TieredKVCache t(host_only(16), d.manager, d.arena, kModel);
  Request a = make_request(1, 17, 0);  // 4 full blocks + 1 token
  compute_and_free(d, a);
  evict_everything(d, t, 2);
  EXPECT_EQ(t.host()->stats().stored_blocks, 4u);
  Request again = make_request(3, 17, 0);
  const TierHitTokens hit = admit_and_verify(d, t, again);
  EXPECT_EQ(hit, (TierHitTokens{0, 16, 0}));
  EXPECT_EQ(t.host()->stats().loaded_blocks, 4u);
  // Now they are on the device again: the next lookup is a device hit.
  Request third = make_request(4, 17, 0);
  EXPECT_EQ(admit_and_verify(d, t, third), (TierHitTokens{16, 0, 0}));
}

TEST(TieredCache, PartialDeviceHitContinuesIntoTheHostTier) {
  Device d(9);
  TieredKVCache t(host_only(16), d.manager, d.arena, kModel);
  Request a = make_request(1, 25, 0);  // 6 full blocks
  compute_and_free(d, a);
  // Evict only the 4 least recently used of them: blocks freed tail first, so the tail goes first.
  Request f = make_request(2, 16, 50000);
  compute_and_free(d, f, &t);
  t.before_forward();
  Request again = make_request(3, 25, 0);
  const TierHitTokens hit = admit_and_verify(d, t, again);
  EXPECT_EQ(hit.total(), 24);
  EXPECT_GT(hit.device, 0);
  EXPECT_GT(hit.host, 0);
}

// Every block, every parent and the root hash to the same value: only tokens and prefix identity
// tell blocks apart.
BlockHash constant_hash(std::span<const std::byte>, uint64_t) { return BlockHash{0x5eed, 0x5eed}; }

TEST(TieredCache, PromotedBlocksConfirmTheirPrefixLikeBlocksTheDeviceComputed) {
  KVCacheManagerConfig c = manager_config(9);
  c.hash_function = &constant_hash;
  Device d(std::move(c), 4);
  TieredKVCache t(host_only(16), d.manager, d.arena, kModel);
  auto tokens = [](TokenId first_block, TokenId second_block) {
    std::vector<TokenId> v;
    for (TokenId b : {first_block, second_block})
      for (TokenId k = 0; k < 4; ++k) v.push_back(b + k);
    v.push_back(9);
    return v;
  };
  // P = X Z: computed, evicted to the host tier, promoted back (X, then Z after X).
  Request p(RequestId{1}, tokens(0, 1000));
  compute_and_free(d, p);
  evict_everything(d, t, 2);
  Request p_again(RequestId{3}, tokens(0, 1000));
  ASSERT_EQ(admit_and_verify(d, t, p_again), (TierHitTokens{0, 8, 0}));
  // Y on the device. Q = Y Z: its block 1 has Z's tokens and, with this hash, Z's hash and
  // parent hash, but it follows Y, not X: the promoted Z must not be spliced onto Y.
  Request r(RequestId{4}, tokens(500, 2000));
  compute_and_free(d, r, &t);
  Request q(RequestId{5}, tokens(500, 1000));
  const ComputedBlocks hit = d.manager.get_computed_blocks(q);
  EXPECT_EQ(hit.num_computed_tokens, 4) << "a promoted block matched after a prefix it was not computed after";
  Request p_third(RequestId{6}, tokens(0, 1000));
  EXPECT_EQ(d.manager.get_computed_blocks(p_third).num_computed_tokens, 8) << "after X it still hits";
  check_all(d, t);
}

TEST(TieredCache, OffloadPolicyKeepsOnlyBlocksHitOftenEnough) {
  Device d(9);
  TierConfig c = host_only(16);
  c.offload_min_hits = 1;
  TieredKVCache t(c, d.manager, d.arena, kModel);
  Request a = make_request(1, 9, 0);  // 2 blocks, hit once below
  compute_and_free(d, a);
  Request a2 = make_request(2, 9, 0);
  compute_and_free(d, a2);
  Request b = make_request(3, 9, 1000);  // never hit
  compute_and_free(d, b);
  evict_everything(d, t, 4);
  EXPECT_EQ(t.host()->stats().stored_blocks, 2u);
  EXPECT_GE(t.skipped_low_hits(), 2u);
}

TEST(TieredCache, HostVictimsAreDemotedToDiskAndPromotedFromThere) {
  TempDir dir;
  Device d(9);
  TierConfig c = host_only(4);
  c.disk_cache_dir = dir.str();
  c.disk_cache_bytes = disk_only(dir.str(), 32).disk_cache_bytes;
  TieredKVCache t(c, d.manager, d.arena, kModel);
  ASSERT_TRUE(t.disk()->writable()) << t.disk()->stats().degraded_reason;
  Request a = make_request(1, 17, 0);
  compute_and_free(d, a);
  evict_everything(d, t, 2);  // a's 4 blocks -> host
  evict_everything(d, t, 3);  // filler 2's 8 blocks -> host, a's demoted to disk
  evict_everything(d, t, 4);
  EXPECT_GE(t.host()->stats().demotions, 4u);
  Request again = make_request(5, 17, 0);
  const TierHitTokens hit = admit_and_verify(d, t, again);
  EXPECT_EQ(hit, (TierHitTokens{0, 0, 16}));
  EXPECT_EQ(t.disk()->stats().loaded_blocks, 4u);
}

TEST(TieredCache, WarmRestartServesTheSameBlocksFromDisk) {
  TempDir dir;
  {
    Device d(17);
    TieredKVCache t(disk_only(dir.str(), 64), d.manager, d.arena, kModel);
    Request a = make_request(1, 33, 0);  // 8 full blocks
    compute_and_free(d, a);
    t.shutdown();  // flush: device-cached blocks go to disk
    EXPECT_EQ(t.disk()->stats().stored_blocks, 8u);
  }
  Device d(17);
  TieredKVCache t(disk_only(dir.str(), 64), d.manager, d.arena, kModel);
  EXPECT_EQ(t.disk()->stats().rebuilt_blocks, 8u);
  Request again = make_request(2, 33, 0);
  EXPECT_EQ(t.prepare_prefix(again), PrefixState::kLoading);  // disk loads are asynchronous
  EXPECT_EQ(admit_and_verify(d, t, again), (TierHitTokens{0, 0, 32}));
  // Another model: a different fingerprint never sees these blocks.
  Device other(17);
  TieredKVCache u(disk_only(dir.str() + "-other", 64), other.manager, other.arena, kModel + 1);
  Request r = make_request(3, 33, 0);
  EXPECT_EQ(u.prepare_prefix(r), PrefixState::kReady);
  EXPECT_EQ(u.take_hit_tokens(r, 0).total(), 0);
  std::filesystem::remove_all(dir.str() + "-other");
}

TEST(TieredCache, CorruptDiskBlockIsAMissCountedAndReclaimed) {
  TempDir dir;
  std::string path;
  size_t slot_bytes = 0, header_bytes = 0;
  {
    Device d(17);
    TieredKVCache t(disk_only(dir.str(), 64), d.manager, d.arena, kModel);
    Request a = make_request(1, 33, 0);
    compute_and_free(d, a);
    t.shutdown();
    path = t.disk()->path();
    slot_bytes = t.disk()->slot_bytes();
    header_bytes = t.disk()->header_bytes();
  }
  // Damage the payload of every slot holding block 2 of the prompt: find it by its tokens.
  {
    Device d(17);
    TieredKVCache t(disk_only(dir.str(), 64), d.manager, d.arena, kModel);
    Request probe = make_request(9, 33, 0);
    d.manager.hash_request(probe);
    BlockContentKey k;
    k.hash = probe.block_hashes[2];
    k.parent = probe.block_hashes[1];
    k.tokens = std::span<const TokenId>(probe.tokens).subspan(8, 4);
    k.extra_digest = probe.block_extra_digest(2);
    auto slot = t.disk()->find(k);
    ASSERT_TRUE(slot.has_value());
    t.shutdown();
    const int fd = ::open(path.c_str(), O_RDWR);
    char c = 0x5a;
    // The file is still locked by `t` but writes by another descriptor are allowed.
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(static_cast<size_t>(*slot) * slot_bytes + header_bytes + 7)), 1);
    ::close(fd);
  }
  Device d(17);
  TieredKVCache t(disk_only(dir.str(), 64), d.manager, d.arena, kModel);
  const int cached_before = t.disk()->num_cached_blocks();
  Request again = make_request(2, 33, 0);
  const TierHitTokens hit = admit_and_verify(d, t, again);
  EXPECT_EQ(t.disk()->stats().corrupt_blocks, 1u);
  EXPECT_EQ(hit.total(), 8);  // blocks 0 and 1: the chain breaks at the corrupt block
  EXPECT_EQ(t.disk()->num_cached_blocks(), cached_before - 1);  // reclaimed
  // The blocks after it were promoted and verified too: they are cached on the device now.
  Request later = make_request(3, 33, 0);
  d.manager.hash_request(later);
  EXPECT_TRUE(d.manager.pool()
                  .find_cached([&] {
                    BlockContentKey k;
                    k.hash = later.block_hashes[3];
                    k.parent = later.block_hashes[2];
                    k.tokens = std::span<const TokenId>(later.tokens).subspan(12, 4);
                    k.extra_digest = later.block_extra_digest(3);
                    return k;
                  }())
                  .has_value());
}

TEST(TieredCache, SwapOutGoesToHostThenDiskAndComesBackByteForByte) {
  TempDir dir;
  Device d(17);
  TierConfig c = host_only(2);
  c.disk_cache_dir = dir.str();
  c.disk_cache_bytes = disk_only(dir.str(), 16).disk_cache_bytes;
  TieredKVCache t(c, d.manager, d.arena, kModel);
  Request r = make_request(1, 22, 0);  // 6 blocks, the last partial
  auto nb = d.manager.allocate_slots(r, 22);
  ASSERT_TRUE(nb);
  std::vector<BlockId> blocks(d.manager.get_block_ids(r).begin(), d.manager.get_block_ids(r).end());
  for (size_t i = 0; i < blocks.size(); ++i) fill_block(d.arena, blocks[i], BlockHash{77, i});
  ASSERT_TRUE(t.swap_out(r.id, blocks));
  check_all(d, t);
  d.manager.free(r);
  t.before_forward();
  check_all(d, t);
  EXPECT_EQ(t.host()->stats().swapped_out_blocks, 2u);
  EXPECT_EQ(t.disk()->stats().swapped_out_blocks, 4u);
  // Others overwrite the freed device blocks.
  for (BlockId b : blocks) fill_block(d.arena, b, BlockHash{0, 0});
  Request back = r;
  back.num_computed_tokens = 0;
  ASSERT_TRUE(d.manager.allocate_slots(back, 22));
  const auto dst = d.manager.get_block_ids(back);
  SwapInState s = swap_in_and_wait(t, back.id, 0, dst);
  ASSERT_EQ(s, SwapInState::kDone);
  for (size_t i = 0; i < dst.size(); ++i) EXPECT_TRUE(block_holds(d.arena, dst[i], BlockHash{77, i})) << i;
  EXPECT_FALSE(t.has_swap(back.id));
  check_all(d, t);
  EXPECT_EQ(t.host()->slots().num_pinned(), 0);
  EXPECT_EQ(t.disk()->slots().num_pinned(), 0);
  d.manager.free(back);
}

// lazy_swap_copies: blocks the device prefix cache still holds are not copied at swap-out. The
// pool's eviction copies one (block 4), the resume takes blocks 0-3 from the device cache
// uncopied, and the blocks never cached (the partial block 5) are copied at once as before.
TEST(TieredCache, LazySwapCopiesOnlyBlocksTheDeviceCacheDrops) {
  TempDir dir;
  Device d(17);  // 16 usable blocks of 4 tokens
  TierConfig c = host_only(3);
  c.disk_cache_dir = dir.str();
  c.disk_cache_bytes = disk_only(dir.str(), 16).disk_cache_bytes;
  c.lazy_swap_copies = true;
  TieredKVCache t(c, d.manager, d.arena, kModel);
  Request r = make_request(1, 22, 0);  // 5 full blocks, cached as they are allocated, + 2 tokens
  ComputedBlocks hits = d.manager.get_computed_blocks(r);
  ASSERT_TRUE(d.manager.allocate_slots(r, 22, 0, &hits));
  const std::vector<BlockId> blocks(d.manager.get_block_ids(r).begin(), d.manager.get_block_ids(r).end());
  ASSERT_EQ(blocks.size(), 6u);
  auto pattern = [&](size_t i) { return i < 5 ? r.block_hashes[i] : BlockHash{77, 5}; };
  for (size_t i = 0; i < blocks.size(); ++i) fill_block(d.arena, blocks[i], pattern(i));
  r.num_computed_tokens = 22;
  ASSERT_TRUE(t.swap_out(r.id, blocks));  // blocks 0-2 to host slots, 3-5 to disk slots
  check_all(d, t);
  EXPECT_EQ(t.host()->stats().swap_copies_deferred, 3u);
  EXPECT_EQ(t.disk()->stats().swap_copies_deferred, 2u);  // block 5 was never cached: copied now
  d.manager.free(r);
  t.before_forward();
  check_all(d, t);
  // Another request takes the 10 never-used blocks and two of r's: the pool evicts r's blocks
  // tail first, so block 5 (uncached) and block 4 (deferred: copied to its disk slot now), then
  // overwrites them.
  Request other = make_request(2, 12 * 4, 1000);
  compute_and_free(d, other, &t);
  t.before_forward();
  check_all(d, t);
  // Resume: the device cache still holds blocks 0-3; blocks 4 and 5 come from the disk slots.
  Request back = make_request(1, 22, 0);
  ComputedBlocks h2 = d.manager.get_computed_blocks(back);
  ASSERT_EQ(h2.num_computed_tokens, 16);
  ASSERT_TRUE(d.manager.allocate_slots(back, 6, 16, &h2));
  const auto table = d.manager.get_block_ids(back);
  SwapInState s = swap_in_and_wait(t, back.id, 4, table.subspan(4, 2));
  ASSERT_EQ(s, SwapInState::kDone);
  for (size_t i = 0; i < table.size(); ++i) EXPECT_TRUE(block_holds(d.arena, table[i], pattern(i))) << i;
  EXPECT_EQ(t.host()->stats().swap_copies_skipped, 3u);  // blocks 0-2: never copied
  EXPECT_EQ(t.disk()->stats().swap_copies_skipped, 1u);  // block 3
  EXPECT_EQ(t.disk()->stats().swapped_in_blocks, 2u);
  EXPECT_EQ(t.host()->slots().num_pinned(), 0);
  EXPECT_EQ(t.disk()->slots().num_pinned(), 0);
  check_all(d, t);
  d.manager.free(back);
}

// lazy_swap_copies: a prefix-cache reset drops the deferred blocks from the device cache, which
// copies them out while their bytes are intact; a swap-in that needs a block the device cache
// still holds copies it through its slot. Either way the bytes come back.
TEST(TieredCache, LazySwapCopiesOnResetAndAtSwapIn) {
  Device d(17);
  TierConfig c = host_only(16);
  c.lazy_swap_copies = true;
  TieredKVCache t(c, d.manager, d.arena, kModel);
  for (const bool reset : {true, false}) {
    SCOPED_TRACE(reset ? "reset before the swap-in" : "swap-in while the device cache holds them");
    const uint64_t id = reset ? 1 : 2;
    Request r = make_request(id, 20, static_cast<TokenId>(id) * 100);  // 5 full blocks
    ComputedBlocks hits = d.manager.get_computed_blocks(r);
    ASSERT_TRUE(d.manager.allocate_slots(r, 20, 0, &hits));
    const std::vector<BlockId> blocks(d.manager.get_block_ids(r).begin(), d.manager.get_block_ids(r).end());
    for (size_t i = 0; i < blocks.size(); ++i) fill_block(d.arena, blocks[i], r.block_hashes[i]);
    r.num_computed_tokens = 20;
    ASSERT_TRUE(t.swap_out(r.id, blocks));
    d.manager.free(r);
    t.before_forward();
    check_all(d, t);
    if (reset) {
      EXPECT_TRUE(d.manager.reset_prefix_cache().complete());
      t.before_forward();  // the copies queued by the reset run here
      check_all(d, t);
      for (BlockId b : blocks) fill_block(d.arena, b, BlockHash{0, 0});  // free, uncached: reusable
    }
    // Swap in everything into new blocks (no prefix hits asked for).
    Request back = make_request(id + 10, 20, 5000);
    ASSERT_TRUE(d.manager.allocate_slots(back, 20));
    const auto table = d.manager.get_block_ids(back);
    // start_swap_in addresses the swap by the swapped request's id.
    SwapInState s = swap_in_and_wait(t, r.id, 0, table);
    ASSERT_EQ(s, SwapInState::kDone);
    for (size_t i = 0; i < table.size(); ++i) EXPECT_TRUE(block_holds(d.arena, table[i], r.block_hashes[i])) << i;
    EXPECT_EQ(t.host()->slots().num_pinned(), 0);
    check_all(d, t);
    d.manager.free(back);
  }
  EXPECT_EQ(t.host()->stats().swap_copies_deferred, 10u);
  EXPECT_EQ(t.host()->stats().swap_copies_skipped, 0u);
  EXPECT_EQ(t.host()->stats().swapped_in_blocks, 10u);
}

TEST(TieredCache, SwapRefusedWithoutRoomAndFailsOnACorruptDiskBlock) {
  TempDir dir;
  Device d(17);
  TierConfig c = disk_only(dir.str(), 3);
  int corrupt_reads = 0;
  TieredKVCache t(c, d.manager, d.arena, kModel);
  Request big = make_request(1, 20, 0);
  ASSERT_TRUE(d.manager.allocate_slots(big, 20));
  const auto blocks = d.manager.get_block_ids(big);
  EXPECT_FALSE(t.swap_out(big.id, blocks));  // 5 blocks, 3 slots: nothing changes
  check_all(d, t);
  d.manager.free(big);
  Request r = make_request(2, 12, 0);
  ASSERT_TRUE(d.manager.allocate_slots(r, 12));
  std::vector<BlockId> rb(d.manager.get_block_ids(r).begin(), d.manager.get_block_ids(r).end());
  ASSERT_TRUE(t.swap_out(r.id, rb));
  d.manager.free(r);
  t.drain();  // the swap-out writes have landed
  // Damage the swapped blocks on disk.
  const int fd = ::open(t.disk()->path().c_str(), O_RDWR);
  char x = 1;
  for (int s = 0; s < 3; ++s) {
    ASSERT_EQ(::pwrite(fd, &x, 1, static_cast<off_t>(t.disk()->slot_offset(s) + t.disk()->header_bytes() + 3)), 1);
    ++corrupt_reads;
  }
  ::close(fd);
  Request back = r;
  back.num_computed_tokens = 0;
  ASSERT_TRUE(d.manager.allocate_slots(back, 12));
  SwapInState s = swap_in_and_wait(t, back.id, 0, d.manager.get_block_ids(back));
  EXPECT_EQ(s, SwapInState::kFailed);  // the scheduler recomputes: bad KV is never used
  EXPECT_EQ(t.disk()->stats().corrupt_blocks, static_cast<uint64_t>(corrupt_reads));
  check_all(d, t);
  d.manager.free(back);
}

TEST(TieredCache, FailedDiskWritesDegradeTheTierAndServingGoesOn) {
  TempDir dir;
  Device d(9);
  TierConfig c = disk_only(dir.str(), 64);
  c.disk_fault_injection = [](const DiskIoRequest& io) { return io.write ? ENOSPC : 0; };
  c.disk_write_retry_initial = std::chrono::minutes(10);  // no retry within this test
  TieredKVCache t(c, d.manager, d.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_free(d, a);
  evict_everything(d, t, 2);
  t.shutdown();
  EXPECT_TRUE(t.disk()->stats().degraded);
  EXPECT_GT(t.disk()->stats().io_errors, 0u);
  EXPECT_FALSE(t.disk()->writable());
  EXPECT_EQ(t.disk()->num_cached_blocks(), 0);  // failed writes are not indexed
  check_all(d, t);
  // Lookups miss; requests still run.
  Request again = make_request(3, 17, 0);
  EXPECT_EQ(t.prepare_prefix(again), PrefixState::kReady);
  compute_and_free(d, again);
  check_all(d, t);
}

// A full disk (found by the soak: the tier used to stop writing for good): writes pause behind a
// back-off, and once space is back the next retry resumes them and new blocks are stored again.
TEST(TieredCache, DiskWritesResumeOnceTheDiskHasRoomAgain) {
  TempDir dir;
  Device d(9);
  TierConfig c = disk_only(dir.str(), 64);
  auto full = std::make_shared<std::atomic<bool>>(true);
  c.disk_fault_injection = [full](const DiskIoRequest& io) { return io.write && full->load() ? ENOSPC : 0; };
  c.disk_write_retry_initial = std::chrono::milliseconds(50);
  c.disk_write_retry_max = std::chrono::milliseconds(50);
  TieredKVCache t(c, d.manager, d.arena, kModel);
  Request a = make_request(1, 17, 0);
  compute_and_free(d, a);
  evict_everything(d, t, 2);
  t.drain();
  EXPECT_TRUE(t.disk()->stats().degraded);
  EXPECT_FALSE(t.disk()->writable());
  EXPECT_EQ(t.disk()->num_cached_blocks(), 0);
  check_all(d, t);

  full->store(false);  // space freed
  ASSERT_TRUE(eventually([&] { return t.disk()->writable(); }));  // the back-off passed
  Request b = make_request(10, 17, 500);
  compute_and_free(d, b);
  evict_everything(d, t, 11);
  t.drain();
  EXPECT_GT(t.disk()->num_cached_blocks(), 0);  // written again
  EXPECT_FALSE(t.disk()->stats().degraded);
  EXPECT_TRUE(t.disk()->writable());
  Request again = make_request(12, 17, 500);
  EXPECT_GT(admit_and_verify(d, t, again).disk, 0);  // and read back byte for byte
  t.shutdown();
  check_all(d, t);
}

TEST(TieredCache, UnusableDirectoryLeavesTheHostTierWorking) {
  Device d(9);
  TierConfig c = host_only(8);
  c.disk_cache_dir = "/proc/pagedkv-no-such-dir";
  TieredKVCache t(c, d.manager, d.arena, kModel);
  EXPECT_FALSE(t.disk()->available());
  Request a = make_request(1, 17, 0);
  compute_and_free(d, a);
  evict_everything(d, t, 2);
  Request again = make_request(3, 17, 0);
  EXPECT_EQ(admit_and_verify(d, t, again), (TierHitTokens{0, 16, 0}));
  t.shutdown();
}

TEST(TieredCache, WriteThroughPutsComputedBlocksOnDiskAtTheNextStep) {
  TempDir dir;
  Device d(9);
  TierConfig c = disk_only(dir.str(), 64);
  c.write_through = true;
  c.flush_on_shutdown = false;
  {
    TieredKVCache t(c, d.manager, d.arena, kModel);
    Request a = make_request(1, 17, 0);
    compute_and_free(d, a);
    t.on_step_begin();
    t.before_forward();
    t.shutdown();
    EXPECT_EQ(t.disk()->stats().stored_blocks, 4u);
  }
  Device fresh(9);
  TieredKVCache t(c, fresh.manager, fresh.arena, kModel);
  Request again = make_request(2, 17, 0);
  EXPECT_EQ(admit_and_verify(fresh, t, again), (TierHitTokens{0, 0, 16}));
}

TEST(TieredCache, RejectsSeveralKVCacheGroups) {
  KVCacheManagerConfig mc = manager_config(9);
  mc.cache.groups.push_back(mc.cache.groups.front());
  KVCacheManager m(std::move(mc));
  KVArena a(small_spec(), kLayers, 9);
  EXPECT_THROW(TieredKVCache(host_only(4), m, a, kModel), ConfigError);
}

}  // namespace
}  // namespace pagedkv
