// libFuzzer target: the disk tier's index rebuild (tiers/disk_tier.h). A process that starts on a
// cache file another process left — maybe killed mid-write, maybe for another model — must index
// exactly the valid shared blocks in it, each key once at its newest copy, and nothing else.
//
// The fuzzer's bytes describe the file slot by slot, so that valid headers (which random bytes
// would never produce: they carry checksums) are common: each slot is empty, a valid block drawn
// from a small key space (duplicates happen), a private block, a block for another fingerprint, a
// valid header with one bit flipped, or raw bytes; the file may end inside its last slot, and the
// capacity may be smaller than the file. Built and run by scripts/fuzz.sh.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/tiers/disk_slot_format.h"
#include "pagedkv/tiers/disk_tier.h"

namespace {

using namespace pagedkv;

using pagedkv::fuzz::check;

constexpr BlockHash kFingerprint{0x1111, 0x2222};
constexpr BlockHash kOtherFingerprint{0x3333, 0x4444};
constexpr int kBlockSize = 4;

KVCacheSpec tiny_spec() {
  KVCacheSpec spec;
  spec.block_size = kBlockSize;
  spec.num_kv_heads = 1;
  spec.head_dim = 8;
  return spec;
}

// A scratch directory for the whole run (tmpfs when there is one: the file is rewritten per
// input), removed at exit.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    path = (base / ("pagedkv-fuzz-disk-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

StoredBlockKey key_number(int k) {
  StoredBlockKey key;
  key.hash = {0x9e3779b97f4a7c15ull * static_cast<uint64_t>(k + 1), static_cast<uint64_t>(k)};
  key.parent = {static_cast<uint64_t>(k % 3), 0};
  key.group = 0;
  key.tokens.assign(kBlockSize, k);
  return key;
}

enum class SlotKind { kEmpty, kValid, kPrivate, kOtherFingerprint, kFlipped, kRaw };

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ByteReader in{data, size};
  DiskTierOptions options;
  options.dir = scratch_dir();
  options.fingerprint = kFingerprint;
  options.spec = tiny_spec();
  options.num_layers = 1;
  options.use_o_direct = false;
  options.use_io_uring = (in.next() & 1) != 0;
  options.log_degraded = false;
  options.lock_wait_ms = 0;
  const size_t header_bytes = disk_header_bytes(kBlockSize);
  const size_t payload_bytes = options.spec.bytes_per_block_per_layer();
  const size_t slot_bytes = header_bytes + round_up_to(payload_bytes, kDiskAlignment);
  const int capacity_slots = 1 + in.next() % 12;
  options.capacity_bytes = static_cast<size_t>(capacity_slots) * slot_bytes;

  // The file, and what a correct rebuild finds in it.
  const int file_slots = in.next() % 14;
  std::vector<std::byte> file(static_cast<size_t>(file_slots) * slot_bytes);
  std::map<int, std::pair<uint64_t, std::vector<int32_t>>> newest;  // key -> (sequence, slots holding it)
  uint64_t max_sequence = 0;
  std::vector<SlotKind> kinds;
  for (int s = 0; s < file_slots; ++s) {
    const uint8_t op = in.next();
    const auto kind = static_cast<SlotKind>(op % 6);
    kinds.push_back(kind);
    const std::span<std::byte> header(file.data() + static_cast<size_t>(s) * slot_bytes, header_bytes);
    if (kind == SlotKind::kEmpty) continue;
    if (kind == SlotKind::kRaw) {
      for (size_t i = 0, n = in.next() % 128; i < n; ++i) header[i] = static_cast<std::byte>(in.next());
      continue;
    }
    DiskSlotHeader h;
    h.fingerprint = kind == SlotKind::kOtherFingerprint ? kOtherFingerprint : kFingerprint;
    h.key = key_number(in.next() % 5);
    h.payload_bytes = payload_bytes;
    h.sequence = 1 + in.next() % 16;
    h.flags = kind == SlotKind::kPrivate ? kSlotFlagPrivate : 0;
    encode_slot_header(h, header);
    if (kind == SlotKind::kFlipped) {
      const size_t bit = in.take<uint16_t>() % ((104 + 4 * kBlockSize + 8) * 8);  // inside the checked bytes
      header[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    }
  }
  // The file may end anywhere inside its last slot; only whole headers are read.
  size_t file_bytes = file.size();
  if (file_slots > 0 && (in.next() & 1)) file_bytes -= 1 + in.take<uint16_t>() % (slot_bytes - 1);
  const size_t visible = std::min<size_t>(file_slots, static_cast<size_t>(capacity_slots));
  for (size_t s = 0; s < visible; ++s) {
    if ((s * slot_bytes + header_bytes) > file_bytes) break;
    if (kinds[s] != SlotKind::kValid && kinds[s] != SlotKind::kPrivate) continue;
    DiskSlotHeader h;
    check(decode_slot_header(std::span<const std::byte>(file.data() + s * slot_bytes, header_bytes), kFingerprint,
                             kBlockSize, payload_bytes, h) == SlotHeaderStatus::kOk);
    max_sequence = std::max(max_sequence, h.sequence);
    if (kinds[s] == SlotKind::kPrivate) continue;
    auto& [sequence, slots] = newest[static_cast<int>(h.key.tokens[0])];
    if (h.sequence > sequence) slots.clear();
    if (h.sequence >= sequence) {
      sequence = h.sequence;
      slots.push_back(static_cast<int32_t>(s));
    }
  }

  const std::string path =
      (std::filesystem::path(options.dir) / ("pagedkv-" + kFingerprint.hex() + ".kvslots")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file_bytes));
    check(static_cast<bool>(out));
  }
  DiskTier tier(options);
  check(tier.available() && tier.path() == path);
  tier.check_invariants();
  check(tier.stats().rebuilt_blocks == newest.size());
  check(static_cast<size_t>(tier.num_cached_blocks()) == newest.size());
  for (int k = 0; k < 5; ++k) {
    const StoredBlockKey key = key_number(k);
    const std::optional<int32_t> found = tier.find(key.view());
    const auto it = newest.find(k);
    check(found.has_value() == (it != newest.end()));
    if (found) check(std::find(it->second.second.begin(), it->second.second.end(), *found) != it->second.second.end());
  }
  check(tier.next_sequence() > max_sequence);  // new writes are newer than anything rebuilt
  return 0;
}
