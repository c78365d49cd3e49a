// libFuzzer target: the bytes a lower tier hands back — a disk slot's header and a remote-tier
// value (tiers/disk_slot_format.h, tiers/remote_value_format.h). Two properties:
//   - arbitrary bytes never crash the decoders, and a value they accept has its payload inside it;
//   - a header or value written for a block decodes to exactly that block, and with any one bit
//     flipped it is refused (a torn or corrupted block is a miss, never KV for attention).
// Built and run by scripts/fuzz.sh (clang, libFuzzer, ASan+UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/tiers/disk_slot_format.h"
#include "pagedkv/tiers/remote_value_format.h"

namespace {

using namespace pagedkv;

using pagedkv::fuzz::check;

constexpr BlockHash kFingerprint{0x0123456789abcdefull, 0xfedcba9876543210ull};

bool same_key(const StoredBlockKey& a, const StoredBlockKey& b) {
  return a.hash == b.hash && a.parent == b.parent && a.extra_digest == b.extra_digest && a.group == b.group &&
         a.tokens == b.tokens;
}

void arbitrary_bytes(const uint8_t* data, size_t size, int block_size, size_t payload_bytes) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  DiskSlotHeader header;
  if (in.size() >= disk_header_bytes(block_size)) {
    const SlotHeaderStatus s =
        decode_slot_header(in.first(disk_header_bytes(block_size)), kFingerprint, block_size, payload_bytes, header);
    if (s == SlotHeaderStatus::kOk)
      check(header.key.tokens.size() == static_cast<size_t>(block_size) && header.payload_bytes == payload_bytes);
  }
  StoredBlockKey expected;
  expected.tokens.assign(static_cast<size_t>(block_size), 7);
  std::span<const std::byte> payload;
  if (verify_remote_value(in, kFingerprint, expected, payload_bytes, payload) == RemoteValueStatus::kOk)
    check(payload.size() == payload_bytes && payload.data() >= in.data() &&
          payload.data() + payload.size() <= in.data() + in.size());
}

void written_then_flipped(fuzz::ByteReader& b, int block_size, size_t payload_bytes) {
  StoredBlockKey key;
  key.hash = {b.take<uint64_t>(), b.take<uint64_t>()};
  key.parent = {b.take<uint64_t>(), b.take<uint64_t>()};
  key.extra_digest = b.take<uint64_t>();
  key.group = b.take<uint16_t>();
  for (int i = 0; i < block_size; ++i) key.tokens.push_back(b.take<int32_t>());
  const uint32_t flip = b.take<uint32_t>();

  // Remote value: header then payload.
  std::vector<std::byte> value(remote_value_bytes(block_size, payload_bytes));
  const size_t header_bytes = remote_value_header_bytes(block_size);
  for (size_t i = 0; i < payload_bytes; ++i) value[header_bytes + i] = static_cast<std::byte>(b.take<uint8_t>());
  encode_remote_value_header(key, kFingerprint, payload_bytes, value);
  std::span<const std::byte> payload;
  check(verify_remote_value(value, kFingerprint, key, payload_bytes, payload) == RemoteValueStatus::kOk);
  check(payload.data() == value.data() + header_bytes && payload.size() == payload_bytes);
  value[flip / 8 % value.size()] ^= static_cast<std::byte>(1u << (flip % 8));
  check(verify_remote_value(value, kFingerprint, key, payload_bytes, payload) != RemoteValueStatus::kOk);

  // Disk slot header: every field byte and its checksum are covered (the padding after is not read).
  DiskSlotHeader h;
  h.fingerprint = kFingerprint;
  h.key = key;
  h.payload_bytes = payload_bytes;
  h.payload_checksum = b.take<uint64_t>();
  h.sequence = b.take<uint64_t>();
  h.flags = b.take<uint16_t>() & kSlotFlagPrivate;
  std::vector<std::byte> slot(disk_header_bytes(block_size));
  encode_slot_header(h, slot);
  DiskSlotHeader back;
  check(decode_slot_header(slot, kFingerprint, block_size, payload_bytes, back) == SlotHeaderStatus::kOk);
  check(same_key(back.key, key) && back.payload_checksum == h.payload_checksum && back.sequence == h.sequence &&
        back.flags == h.flags && back.fingerprint == kFingerprint);
  const size_t covered = block_header_field_bytes(block_size);
  slot[flip / 8 % covered] ^= static_cast<std::byte>(1u << (flip % 8));
  check(decode_slot_header(slot, kFingerprint, block_size, payload_bytes, back) != SlotHeaderStatus::kOk);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int block_size = 1 + data[0] % 16;
  const size_t payload_bytes = 8 * (1 + data[1] % 16);
  arbitrary_bytes(data + 2, size - 2, block_size, payload_bytes);
  fuzz::ByteReader b{data + 2, size - 2};
  written_then_flipped(b, block_size, payload_bytes);
  return 0;
}
