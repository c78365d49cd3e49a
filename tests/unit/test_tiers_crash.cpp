// A process killed with SIGKILL in the middle of disk-tier writes, many times over: after each
// kill a new process rebuilds the index from the slot headers, every block it serves is intact
// (its bytes are a pure function of its key, so a torn or stale payload cannot pass), damaged
// slots are counted and reclaimed, and the tier keeps taking and serving new blocks.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/tiers/disk_tier.h"
#include "pagedkv/tiers/transfer_engine.h"
#include "tiers_test_support.h"

extern char** environ;

namespace pagedkv {
namespace {

using namespace pagedkv::testing;

constexpr int kSlots = 48;
constexpr int kBatch = 8;

StoredBlockKey crash_key(uint64_t n) {
  StoredBlockKey k;
  k.hash = BlockHash{n * 0x9E3779B97F4A7C15ull + 1, n};
  k.parent = BlockHash{n - 1, 0};
  for (int i = 0; i < 4; ++i) k.tokens.push_back(static_cast<TokenId>((n * 4 + static_cast<uint64_t>(i)) % 100000));
  return k;
}

DiskTierOptions crash_options(const std::string& dir) {
  DiskTierOptions o;
  o.dir = dir;
  o.spec = small_spec();
  o.num_layers = kLayers;
  o.fingerprint = BlockHash{0xc4a5, 0x11};
  o.log_degraded = false;
  o.capacity_bytes = 0;
  DiskTierOptions probe = o;
  probe.capacity_bytes = size_t{1} << 20;
  probe.dir = dir + "/probe";
  o.capacity_bytes = static_cast<size_t>(kSlots) * DiskTier(probe).slot_bytes();
  return o;
}

// A batch writing the blocks of keys crash_key(first) .. crash_key(first + count - 1), filled into
// device blocks 0 .. count-1, to newly allocated slots (indexed and pinned until written).
TransferBatch write_batch(DiskTier& disk, KVArena& device, uint64_t first, int count) {
  TransferBatch b;
  for (int k = 0; k < count; ++k) {
    const StoredBlockKey key = crash_key(first + static_cast<uint64_t>(k));
    const int32_t slot = disk.slots().allocate();
    disk.slots().cache(slot, key.view());
    fill_block(device, BlockId{k}, key.hash);
    DiskWrite w;
    w.source_block = k;
    w.slot = slot;
    w.header.key = key;
    w.header.sequence = disk.next_sequence();
    b.disk_writes.push_back(std::move(w));
  }
  return b;
}

// Writes batches of blocks to the disk tier (cycling through its slots by LRU) until killed.
TEST(TiersCrashChild, WriteBlocksUntilKilled) {
  const char* dir = std::getenv("PAGEDKV_TIERS_CRASH_DIR");
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of TiersCrash.SigkillDuringDiskWrites";
  const uint64_t seed = std::strtoull(std::getenv("PAGEDKV_TIERS_CRASH_SEED"), nullptr, 10);
  DiskTierOptions o = crash_options(dir);
  // Odd children write with io_uring and O_DIRECT, even ones with pwrite through the page cache.
  o.use_io_uring = o.use_o_direct = (seed % 2) == 1;
  DiskTier disk(o);
  if (!disk.writable()) std::_Exit(3);
  KVArena device(small_spec(), kLayers, kBatch);
  TransferEngine engine(device, nullptr, &disk);
  for (uint64_t n = seed << 32;; n += kBatch) {
    TransferHandle h = engine.submit(write_batch(disk, device, n, kBatch));
    h.wait();
    for (const DiskWrite& w : h.batch().disk_writes) {
      if (!w.ok) disk.slots().uncache(w.slot);
      disk.slots().unpin(w.slot);
    }
  }
}

struct Verified {
  int intact = 0;
  int damaged = 0;
};

// Reads every indexed block; checks each one served is byte-for-byte its key's pattern; reclaims
// the damaged ones; then writes and reads back fresh blocks.
Verified verify_and_reuse(const std::string& dir, uint64_t fresh_base) {
  Verified v;
  DiskTier disk(crash_options(dir));
  EXPECT_TRUE(disk.writable()) << disk.stats().degraded_reason;
  KVArena device(small_spec(), kLayers, kSlots);
  {
    TransferEngine engine(device, nullptr, &disk);
    TransferBatch b = read_every_cached_slot(disk);
    for (const DiskRead& r : b.disk_reads) disk.slots().pin(r.slot);
    TransferHandle h = engine.submit(std::move(b));
    h.wait();
    for (const DiskRead& r : h.batch().disk_reads) {
      if (r.result == ReadResult::kOk) {
        ++v.intact;
        EXPECT_TRUE(block_holds(device, BlockId{r.device_block}, r.expected.hash))
            << "slot " << r.slot << " served bad KV";
      } else {
        ++v.damaged;
        disk.slots().uncache(r.slot);
        disk.invalidate_on_disk(r.slot);
      }
      disk.slots().unpin(r.slot);
    }
    disk.check_invariants();
    // The tier keeps working: new blocks in, the same bytes out.
    TransferHandle wh = engine.submit(write_batch(disk, device, fresh_base, 4));
    wh.wait();
    TransferBatch rb;
    for (const DiskWrite& dw : wh.batch().disk_writes) {
      EXPECT_TRUE(dw.ok);
      DiskRead r;
      r.slot = dw.slot;
      r.device_block = 10 + static_cast<int32_t>(rb.disk_reads.size());
      r.expected = dw.header.key;
      rb.disk_reads.push_back(std::move(r));
    }
    TransferHandle rh = engine.submit(std::move(rb));
    rh.wait();
    for (const DiskRead& r : rh.batch().disk_reads) {
      EXPECT_EQ(r.result, ReadResult::kOk);
      EXPECT_TRUE(block_holds(device, BlockId{r.device_block}, r.expected.hash));
    }
    for (const DiskWrite& dw : wh.batch().disk_writes) disk.slots().unpin(dw.slot);
  }
  return v;
}

TEST(TiersCrash, SigkillDuringDiskWritesNeverServesABadBlock) {
  TempDir dir;
  const int kills = std::getenv("PAGEDKV_TIERS_CRASH_KILLS") ? std::atoi(std::getenv("PAGEDKV_TIERS_CRASH_KILLS")) : 30;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_ms(5, 60);
  int intact = 0, damaged = 0;
  const std::string self = "/proc/self/exe";
  for (int i = 0; i < kills; ++i) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    env_strings.push_back("PAGEDKV_TIERS_CRASH_DIR=" + dir.str());
    env_strings.push_back("PAGEDKV_TIERS_CRASH_SEED=" + std::to_string(i + 1));
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string filter = "--gtest_filter=TiersCrashChild.*";
    std::string exe = self;
    char* argv[] = {exe.data(), filter.data(), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(40 + delay_ms(rng)));  // start-up, then writing
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited by itself (status " << status << "): it could not write";
    const Verified v = verify_and_reuse(dir.str(), (static_cast<uint64_t>(i) + 1000) << 32);
    intact += v.intact;
    damaged += v.damaged;
  }
  RecordProperty("intact_blocks", intact);
  RecordProperty("damaged_blocks", damaged);
  EXPECT_GT(intact, 0);
  std::printf("%d kills: %d blocks served intact, %d damaged blocks caught and reclaimed\n", kills, intact, damaged);
}

}  // namespace
}  // namespace pagedkv
