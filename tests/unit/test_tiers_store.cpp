// The tiers' building blocks on their own: the slot index (states, LRU, confirmed lookups), the
// disk slot format (round trip, torn and foreign headers), the disk tier (rebuild, degraded
// modes) and the transfer engine (coalesced copies, byte-for-byte round trips).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <initializer_list>

#include "pagedkv/core/error.h"
#include "pagedkv/tiers/aligned_buffer.h"
#include "pagedkv/tiers/disk_slot_format.h"
#include "pagedkv/tiers/disk_tier.h"
#include "pagedkv/tiers/slot_index.h"
#include "pagedkv/tiers/transfer_engine.h"
#include "tiers_test_support.h"

namespace pagedkv {
namespace {

using namespace pagedkv::testing;

StoredBlockKey key_for(uint64_t n, int block_size = 4) {
  StoredBlockKey k;
  k.hash = BlockHash{n * 0x100000001b3ull + 7, n};
  k.parent = BlockHash{n, n + 1};
  k.extra_digest = n % 3;
  for (int i = 0; i < block_size; ++i) k.tokens.push_back(static_cast<TokenId>(n * 10 + static_cast<uint64_t>(i)));
  return k;
}

TEST(TierSlotIndex, EmptySlotsFirstThenLruEvictionWithCallback) {
  SlotIndex s(3, 4);
  std::vector<int32_t> evicted;
  auto on_evict = [&](int32_t v) { evicted.push_back(v); };
  for (int i = 0; i < 3; ++i) {
    const int32_t slot = s.allocate(on_evict);
    EXPECT_EQ(slot, i);  // lowest empty slot first
    const StoredBlockKey k = key_for(static_cast<uint64_t>(i));
    s.cache(slot, k.view());
    s.unpin(slot);
    s.check_invariants();
  }
  EXPECT_EQ(s.num_empty(), 0);
  s.touch(0);  // 0 becomes the most recently used: 1 is the LRU victim
  const int32_t slot = s.allocate(on_evict);
  EXPECT_EQ(slot, 1);
  EXPECT_EQ(evicted, std::vector<int32_t>{1});
  EXPECT_FALSE(s.find(key_for(1).view()).has_value());
  EXPECT_EQ(s.find(key_for(0).view()), std::optional<int32_t>(0));
  s.check_invariants();
  // Pinned slots are never evicted.
  s.pin(0);
  s.pin(2);
  EXPECT_EQ(s.allocate(on_evict), -1);
  s.unpin(0);
  s.unpin(2);
  s.unpin(1);  // uncached: back to empty
  EXPECT_EQ(s.num_empty(), 1);
  s.check_invariants();
}

TEST(TierSlotIndex, LookupConfirmsTheWholeKey) {
  SlotIndex s(4, 4);
  StoredBlockKey k = key_for(5);
  const int32_t slot = s.allocate();
  s.cache(slot, k.view());
  s.unpin(slot);
  StoredBlockKey other = k;
  other.tokens[2] += 1;  // same hash, other tokens: a collision must miss
  EXPECT_FALSE(s.find(other.view()).has_value());
  other = k;
  other.parent.lo ^= 1;
  EXPECT_FALSE(s.find(other.view()).has_value());
  other = k;
  other.extra_digest ^= 1;
  EXPECT_FALSE(s.find(other.view()).has_value());
  other = k;
  other.group = 1;
  EXPECT_FALSE(s.find(other.view()).has_value());
  EXPECT_TRUE(s.find(k.view()).has_value());
  // A second block with the same hash chains behind the first.
  StoredBlockKey twin = k;
  twin.tokens[0] = 999;
  const int32_t slot2 = s.allocate();
  s.cache(slot2, twin.view());
  EXPECT_EQ(s.find(twin.view()), std::optional<int32_t>(slot2));
  s.uncache(slot);
  EXPECT_EQ(s.find(twin.view()), std::optional<int32_t>(slot2));
  EXPECT_FALSE(s.find(k.view()).has_value());
  s.unpin(slot2);
  s.check_invariants();
  EXPECT_THROW(s.unpin(slot), UsageError);  // already empty: a double release
}

TEST(TierSlotIndex, ClaimedSlotsAreSkippedByAllocation) {
  // An index rebuild claims the slots it finds on disk; allocation then hands out the others,
  // lowest first, and claimed slots come back to the empty set when released.
  SlotIndex s(100000, 4);
  for (int32_t i = 0; i < 100000; i += 2) ASSERT_TRUE(s.claim(i));
  EXPECT_FALSE(s.claim(0));
  EXPECT_EQ(s.num_empty(), 50000);
  EXPECT_EQ(s.allocate(), 1);
  EXPECT_EQ(s.allocate(), 3);
  s.unpin(0);
  EXPECT_EQ(s.allocate(), 0);
  s.check_invariants();
}

TEST(TierSlotFormat, RoundTripAndEveryKindOfDamage) {
  const BlockHash fp{1, 2};
  DiskSlotHeader h;
  h.fingerprint = fp;
  h.key = key_for(9, 16);
  h.payload_bytes = 12345;
  h.payload_checksum = 77;
  h.sequence = 42;
  const size_t n = disk_header_bytes(16);
  EXPECT_EQ(n % kDiskAlignment, 0u);
  std::vector<std::byte> buf(n);
  encode_slot_header(h, buf);
  DiskSlotHeader got;
  ASSERT_EQ(decode_slot_header(buf, fp, 16, 12345, got), SlotHeaderStatus::kOk);
  EXPECT_TRUE(got.key.matches(h.key.view()));
  EXPECT_EQ(got.sequence, 42u);
  EXPECT_EQ(got.payload_checksum, 77u);
  EXPECT_EQ(decode_slot_header(buf, BlockHash{1, 3}, 16, 12345, got), SlotHeaderStatus::kFingerprintMismatch);
  EXPECT_EQ(decode_slot_header(buf, fp, 8, 12345, got), SlotHeaderStatus::kBadLayout);
  EXPECT_EQ(decode_slot_header(buf, fp, 16, 999, got), SlotHeaderStatus::kBadLayout);
  auto flipped = buf;
  flipped[110] ^= std::byte{1};  // a token id: torn or corrupted header
  EXPECT_EQ(decode_slot_header(flipped, fp, 16, 12345, got), SlotHeaderStatus::kBadChecksum);
  std::vector<std::byte> zeros(n);
  EXPECT_EQ(decode_slot_header(zeros, fp, 16, 12345, got), SlotHeaderStatus::kEmpty);
  flipped = buf;
  flipped[0] ^= std::byte{1};
  EXPECT_EQ(decode_slot_header(flipped, fp, 16, 12345, got), SlotHeaderStatus::kBadMagic);
  // Fingerprints change with every part of the layout and the model.
  const KVCacheSpec spec = small_spec(16);
  const BlockHash base = kv_layout_fingerprint(7, spec, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 4});
  KVCacheSpec s2 = spec;
  s2.dtype = DType::kF16;
  EXPECT_NE(base, kv_layout_fingerprint(8, spec, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 4}));
  EXPECT_NE(base, kv_layout_fingerprint(7, s2, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 4}));
  // A quantized block is never read as another format: int8 and fp8 differ from each other and
  // from every float format.
  KVCacheSpec s_int8 = spec, s_fp8 = spec;
  s_int8.dtype = DType::kInt8;
  s_fp8.dtype = DType::kFP8;
  const BlockHash int8_fp = kv_layout_fingerprint(7, s_int8, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 4});
  const BlockHash fp8_fp = kv_layout_fingerprint(7, s_fp8, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 4});
  EXPECT_NE(int8_fp, fp8_fp);
  EXPECT_NE(int8_fp, base);
  EXPECT_NE(fp8_fp, base);
  EXPECT_NE(int8_fp, kv_layout_fingerprint(7, s2, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 4}));
  EXPECT_NE(base, kv_layout_fingerprint(7, spec, 3, HashAlgorithm::kXxh3_128, BlockHash{3, 4}));
  EXPECT_NE(base, kv_layout_fingerprint(7, spec, 2, HashAlgorithm::kSha256, BlockHash{3, 4}));
  EXPECT_NE(base, kv_layout_fingerprint(7, spec, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 5}));
  EXPECT_EQ(base, kv_layout_fingerprint(7, spec, 2, HashAlgorithm::kXxh3_128, BlockHash{3, 4}));
}

// The fingerprint's bytes as disk_slot_format.h documents them, with the layout markers earlier
// builds did not write: pins that a float layout keeps the fingerprint blocks were stored under,
// and that int8 blocks of the earlier layouts (unrotated; rotated with one f32 scale) never match
// today's (rotated keys with an f16 scale and offset).
BlockHash fingerprint_with_markers(uint64_t model_digest, const KVCacheSpec& spec, int num_layers, HashAlgorithm hash,
                                   const BlockHash& root, std::initializer_list<uint32_t> markers) {
  std::byte buf[96] = {};
  size_t o = 0;
  auto add = [&](auto v) {
    std::memcpy(buf + o, &v, sizeof(v));
    o += sizeof(v);
  };
  add(uint64_t{0x70616765646b7631ull});
  add(uint32_t{kDiskSlotFormatVersion});
  add(model_digest);
  for (int32_t field : {static_cast<int32_t>(spec.kind), spec.block_size, spec.num_kv_heads, spec.head_dim,
                        static_cast<int32_t>(spec.dtype), spec.sliding_window, num_layers, static_cast<int32_t>(hash)})
    add(field);
  add(root.lo);
  add(root.hi);
  for (uint32_t m : markers) add(m);
  const XXH128_hash_t h = XXH3_128bits(buf, o);
  return BlockHash{h.low64, h.high64};
}

TEST(DiskSlotFormat, FingerprintsOfEarlierLayouts) {
  constexpr uint32_t kRotated = 0x31746f72, kOffsets = 0x3166666f;  // "rot1", "off1"
  const BlockHash root{3, 4};
  KVCacheSpec spec = small_spec(16);  // head_dim 8: int8 keys are rotated
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8}) {
    spec.dtype = dtype;
    EXPECT_EQ(kv_layout_fingerprint(7, spec, 2, HashAlgorithm::kXxh3_128, root),
              fingerprint_with_markers(7, spec, 2, HashAlgorithm::kXxh3_128, root, {}))
        << dtype_name(dtype);
  }
  spec.dtype = DType::kInt8;
  const BlockHash int8_fp = kv_layout_fingerprint(7, spec, 2, HashAlgorithm::kXxh3_128, root);
  EXPECT_EQ(int8_fp, fingerprint_with_markers(7, spec, 2, HashAlgorithm::kXxh3_128, root, {kRotated, kOffsets}));
  EXPECT_NE(int8_fp, fingerprint_with_markers(7, spec, 2, HashAlgorithm::kXxh3_128, root, {kRotated}));
  EXPECT_NE(int8_fp, fingerprint_with_markers(7, spec, 2, HashAlgorithm::kXxh3_128, root, {}));
}

DiskTierOptions disk_options(const std::string& dir, size_t slots, bool uring = true, bool direct = true) {
  DiskTierOptions o;
  o.dir = dir;
  o.spec = small_spec();
  o.num_layers = kLayers;
  o.fingerprint = BlockHash{11, 22};
  o.use_io_uring = uring;
  o.use_o_direct = direct;
  o.log_degraded = false;
  DiskTier probe_size(o);  // slot size does not depend on the capacity
  o.capacity_bytes = slots * probe_size.slot_bytes();
  return o;
}

// Writes blocks 0..n-1 of `device` (filled with key_for(i)'s pattern) to disk slots via the
// transfer engine, and registers them.
void write_blocks(DiskTier& disk, KVArena& device, int n) {
  TransferEngine engine(device, nullptr, &disk);
  TransferBatch b;
  for (int i = 0; i < n; ++i) {
    const StoredBlockKey k = key_for(static_cast<uint64_t>(i));
    fill_block(device, BlockId{i}, k.hash);
    const int32_t slot = disk.slots().allocate();
    disk.slots().cache(slot, k.view());
    DiskWrite w;
    w.source_block = i;
    w.slot = slot;
    w.header.key = k;
    w.header.sequence = disk.next_sequence();
    b.disk_writes.push_back(w);
  }
  TransferHandle h = engine.submit(std::move(b));
  h.wait();
  for (const DiskWrite& w : h.batch().disk_writes) {
    EXPECT_TRUE(w.ok) << "slot " << w.slot << " errno " << w.error;
    disk.slots().unpin(w.slot);
  }
  EXPECT_EQ(engine.stats().disk_ios.load(), 1u) << "adjacent slots are one I/O";
}

// Reads every cached slot back into `device` blocks [0, n) and returns the per-slot results.
std::vector<ReadResult> read_all(DiskTier& disk, KVArena& device, std::vector<StoredBlockKey>& keys) {
  TransferEngine engine(device, nullptr, &disk);
  TransferBatch b = read_every_cached_slot(disk);
  for (const DiskRead& r : b.disk_reads) keys.push_back(r.expected);
  TransferHandle h = engine.submit(std::move(b));
  h.wait();
  std::vector<ReadResult> out;
  for (const DiskRead& r : h.batch().disk_reads) out.push_back(r.result);
  return out;
}

TEST(TierDisk, WritesRebuildsAndReadsBackByteForByteOnEveryBackend) {
  for (bool uring : {true, false}) {
    for (bool direct : {true, false}) {
      TempDir dir;
      KVArena device(small_spec(), kLayers, 16);
      {
        DiskTier disk(disk_options(dir.str(), 8, uring, direct));
        ASSERT_TRUE(disk.writable()) << disk.stats().degraded_reason;
        EXPECT_EQ(disk.stats().io_backend, std::string(uring ? "io_uring" : "pread") + (direct ? "+O_DIRECT" : ""));
        write_blocks(disk, device, 6);
        disk.check_invariants();
      }
      KVArena fresh(small_spec(), kLayers, 16);
      DiskTier again(disk_options(dir.str(), 8, uring, direct));
      EXPECT_EQ(again.stats().rebuilt_blocks, 6u);
      EXPECT_EQ(again.num_cached_blocks(), 6);
      again.check_invariants();
      std::vector<StoredBlockKey> keys;
      const auto results = read_all(again, fresh, keys);
      ASSERT_EQ(results.size(), 6u);
      for (size_t i = 0; i < results.size(); ++i) {
        EXPECT_EQ(results[i], ReadResult::kOk);
        EXPECT_TRUE(block_holds(fresh, BlockId{static_cast<int32_t>(i)}, keys[i].hash));
      }
    }
  }
}

TEST(TierDisk, CorruptPayloadTornHeaderTruncationAndForeignFingerprint) {
  TempDir dir;
  KVArena device(small_spec(), kLayers, 16);
  const DiskTierOptions opts = disk_options(dir.str(), 8);
  std::string path;
  size_t slot_bytes = 0, header_bytes = 0;
  {
    DiskTier disk(opts);
    write_blocks(disk, device, 6);
    path = disk.path();
    slot_bytes = disk.slot_bytes();
    header_bytes = disk.header_bytes();
  }
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto flip = [&](off_t at) {
    char c;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c = static_cast<char>(c ^ 0x40);
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
  };
  flip(static_cast<off_t>(1 * slot_bytes + header_bytes + 100));  // slot 1: payload bit flip
  flip(static_cast<off_t>(2 * slot_bytes + 110));  // slot 2: header (torn) damage
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(5 * slot_bytes + header_bytes + 10)), 0);  // slot 5: short
  ::close(fd);
  {
    DiskTier disk(opts);
    EXPECT_EQ(disk.stats().corrupt_blocks, 1u);  // the torn header is caught at rebuild
    EXPECT_EQ(disk.num_cached_blocks(), 5);
    KVArena fresh(small_spec(), kLayers, 16);
    std::vector<StoredBlockKey> keys;
    const auto results = read_all(disk, fresh, keys);
    int ok = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i] == ReadResult::kOk) {
        ++ok;
        EXPECT_TRUE(block_holds(fresh, BlockId{static_cast<int32_t>(i)}, keys[i].hash));
      } else {
        EXPECT_TRUE(results[i] == ReadResult::kCorrupt || results[i] == ReadResult::kShortRead);
      }
    }
    EXPECT_EQ(ok, 3);  // slots 0, 3, 4
  }
}

TEST(TierDisk, ForeignFingerprintSlotsAreCountedAndNeverIndexed) {
  TempDir dir;
  KVArena device(small_spec(), kLayers, 16);
  const DiskTierOptions opts = disk_options(dir.str(), 8);
  std::string path;
  {
    DiskTier disk(opts);
    write_blocks(disk, device, 4);
    path = disk.path();
  }
  DiskTierOptions foreign = opts;
  foreign.fingerprint = BlockHash{99, 99};
  std::string foreign_path;
  { foreign_path = DiskTier(foreign).path(); }
  std::filesystem::copy_file(path, foreign_path, std::filesystem::copy_options::overwrite_existing);
  DiskTier disk(foreign);
  EXPECT_EQ(disk.stats().fingerprint_mismatches, 4u);
  EXPECT_EQ(disk.num_cached_blocks(), 0);
  EXPECT_EQ(disk.slots().num_empty(), 8);  // reclaimed
}

TEST(TierDisk, UnusableDirectoriesDegradeWithoutThrowing) {
  TempDir dir;
  const std::string file = (dir.path / "a-file").string();
  std::ofstream(file) << "x";
  for (const std::string& bad : {file + "/sub", std::string("/proc/pagedkv-cannot-create")}) {
    DiskTierOptions o = disk_options(dir.str(), 4);
    o.dir = bad;
    DiskTier disk(o);
    EXPECT_FALSE(disk.available()) << bad;
    EXPECT_TRUE(disk.stats().degraded);
    EXPECT_FALSE(disk.stats().degraded_reason.empty());
    EXPECT_FALSE(disk.find(key_for(1).view()).has_value());
  }
  // A directory another process holds: the second opener degrades instead of sharing the file.
  DiskTier first(disk_options(dir.str(), 4));
  ASSERT_TRUE(first.available());
  DiskTierOptions busy = disk_options(dir.str(), 4);
  busy.lock_wait_ms = 20;
  DiskTier second(busy);
  EXPECT_FALSE(second.available());
  EXPECT_NE(second.stats().degraded_reason.find("in use"), std::string::npos);
  // A capacity below one slot.
  DiskTierOptions tiny = disk_options(dir.str(), 4);
  tiny.capacity_bytes = 100;
  DiskTier small(tiny);
  EXPECT_FALSE(small.available());
}

TEST(TierTransfer, CoalescesAdjacentBlocksAndRoundTripsThroughTheHostArena) {
  KVArena device(small_spec(), kLayers, 32);
  KVArena host(small_spec(), kLayers, 32);
  for (int i = 0; i < 32; ++i) fill_block(device, BlockId{i}, BlockHash{static_cast<uint64_t>(i), 1});
  TransferEngine engine(device, &host, nullptr);
  TransferBatch out;
  // Device 4..11 -> host 20..27 (one run), device 2 -> host 0, device 30 -> host 5.
  for (int i = 0; i < 8; ++i) out.device_to_host.push_back(MemoryCopy{4 + i, 20 + i, TransferPurpose::kSwap, {}});
  out.device_to_host.push_back(MemoryCopy{2, 0, TransferPurpose::kSwap, {}});
  out.device_to_host.push_back(MemoryCopy{30, 5, TransferPurpose::kSwap, {}});
  engine.submit(std::move(out)).wait();
  EXPECT_EQ(engine.stats().memory_runs.load(), 3u);
  for (int i = 0; i < 8; ++i)
    EXPECT_TRUE(block_holds(host, BlockId{20 + i}, BlockHash{static_cast<uint64_t>(4 + i), 1}));
  EXPECT_TRUE(block_holds(host, BlockId{0}, BlockHash{2, 1}));
  // Back into other device blocks.
  TransferBatch in;
  for (int i = 0; i < 8; ++i) in.host_to_device.push_back(MemoryCopy{20 + i, 12 + i, TransferPurpose::kSwap, {}});
  TransferHandle h = engine.submit(std::move(in));
  h.wait();
  EXPECT_TRUE(h.memory_done());
  for (int i = 0; i < 8; ++i)
    EXPECT_TRUE(block_holds(device, BlockId{12 + i}, BlockHash{static_cast<uint64_t>(4 + i), 1}));
}

}  // namespace
}  // namespace pagedkv
