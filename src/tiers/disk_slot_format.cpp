#include "pagedkv/tiers/disk_slot_format.h"

#include <fmt/format.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <bit>
#include <cstring>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/cpu_isa.h"
#include "pagedkv/storage/key_rotation.h"
#include "pagedkv/storage/kv_quantize.h"

namespace pagedkv {
namespace {

static_assert(std::endian::native == std::endian::little, "pagedkv serializes little-endian");

constexpr size_t kTokensOffset = 104;

template <typename T>
void put(std::span<std::byte> out, size_t offset, T v) {
  std::memcpy(out.data() + offset, &v, sizeof(T));
}

template <typename T>
T get(std::span<const std::byte> in, size_t offset) {
  T v;
  std::memcpy(&v, in.data() + offset, sizeof(T));
  return v;
}

}  // namespace

size_t disk_header_bytes(int block_size) {
  return round_up_to(kTokensOffset + 4 * static_cast<size_t>(block_size) + 8, kDiskAlignment);
}

size_t block_header_field_bytes(int block_size) { return kTokensOffset + 4 * static_cast<size_t>(block_size) + 8; }

void encode_slot_header(const DiskSlotHeader& h, std::span<std::byte> out) {
  encode_block_header(h, out, kDiskSlotMagic, disk_header_bytes(static_cast<int>(h.key.tokens.size())));
}

void encode_block_header(const DiskSlotHeader& h, std::span<std::byte> out, uint64_t magic, size_t bytes) {
  const size_t n = h.key.tokens.size();
  if (bytes < block_header_field_bytes(static_cast<int>(n)) || out.size() < bytes)
    throw UsageError(fmt::format("block header needs {} bytes, buffer has {}", bytes, out.size()));
  std::memset(out.data(), 0, bytes);
  put<uint64_t>(out, 0, magic);
  put<uint32_t>(out, 8, kDiskSlotFormatVersion);
  put<uint32_t>(out, 12, static_cast<uint32_t>(bytes));
  put<uint64_t>(out, 16, h.fingerprint.lo);
  put<uint64_t>(out, 24, h.fingerprint.hi);
  put<uint64_t>(out, 32, h.key.hash.lo);
  put<uint64_t>(out, 40, h.key.hash.hi);
  put<uint64_t>(out, 48, h.key.parent.lo);
  put<uint64_t>(out, 56, h.key.parent.hi);
  put<uint64_t>(out, 64, h.key.extra_digest);
  put<uint16_t>(out, 72, h.key.group);
  put<uint16_t>(out, 74, h.flags);
  put<uint32_t>(out, 76, static_cast<uint32_t>(n));
  put<uint64_t>(out, 80, h.payload_bytes);
  put<uint64_t>(out, 88, h.payload_checksum);
  put<uint64_t>(out, 96, h.sequence);
  std::memcpy(out.data() + kTokensOffset, h.key.tokens.data(), 4 * n);
  const size_t end = kTokensOffset + 4 * n;
  put<uint64_t>(out, end, XXH3_64bits(out.data(), end));
}

std::string_view slot_header_status_name(SlotHeaderStatus s) {
  switch (s) {
    case SlotHeaderStatus::kOk:
      return "ok";
    case SlotHeaderStatus::kEmpty:
      return "empty";
    case SlotHeaderStatus::kBadMagic:
      return "bad magic";
    case SlotHeaderStatus::kBadVersion:
      return "unknown format version";
    case SlotHeaderStatus::kBadChecksum:
      return "header checksum mismatch";
    case SlotHeaderStatus::kFingerprintMismatch:
      return "fingerprint mismatch";
    case SlotHeaderStatus::kBadLayout:
      return "layout mismatch";
  }
  return "?";
}

SlotHeaderStatus decode_slot_header(std::span<const std::byte> in, const BlockHash& fingerprint, int block_size,
                                    uint64_t payload_bytes, DiskSlotHeader& out) {
  return decode_block_header(in, kDiskSlotMagic, disk_header_bytes(block_size), fingerprint, block_size, payload_bytes,
                             out);
}

SlotHeaderStatus decode_block_header(std::span<const std::byte> in, uint64_t expected_magic, size_t header_bytes,
                                     const BlockHash& fingerprint, int block_size, uint64_t payload_bytes,
                                     DiskSlotHeader& out) {
  if (in.size() < kTokensOffset + 8) return SlotHeaderStatus::kBadLayout;
  const uint64_t magic = get<uint64_t>(in, 0);
  if (magic == 0) return SlotHeaderStatus::kEmpty;
  if (magic != expected_magic) return SlotHeaderStatus::kBadMagic;
  if (get<uint32_t>(in, 8) != kDiskSlotFormatVersion) return SlotHeaderStatus::kBadVersion;
  const uint32_t n = get<uint32_t>(in, 76);
  if (n != static_cast<uint32_t>(block_size) || get<uint32_t>(in, 12) != header_bytes ||
      in.size() < kTokensOffset + 4 * static_cast<size_t>(n) + 8)
    return SlotHeaderStatus::kBadLayout;
  const size_t end = kTokensOffset + 4 * static_cast<size_t>(n);
  if (get<uint64_t>(in, end) != XXH3_64bits(in.data(), end)) return SlotHeaderStatus::kBadChecksum;
  out.fingerprint = BlockHash{get<uint64_t>(in, 16), get<uint64_t>(in, 24)};
  if (out.fingerprint != fingerprint) return SlotHeaderStatus::kFingerprintMismatch;
  if (get<uint64_t>(in, 80) != payload_bytes) return SlotHeaderStatus::kBadLayout;
  out.key.hash = BlockHash{get<uint64_t>(in, 32), get<uint64_t>(in, 40)};
  out.key.parent = BlockHash{get<uint64_t>(in, 48), get<uint64_t>(in, 56)};
  out.key.extra_digest = get<uint64_t>(in, 64);
  out.key.group = get<uint16_t>(in, 72);
  out.flags = get<uint16_t>(in, 74);
  out.payload_bytes = payload_bytes;
  out.payload_checksum = get<uint64_t>(in, 88);
  out.sequence = get<uint64_t>(in, 96);
  out.key.tokens.resize(n);
  std::memcpy(out.key.tokens.data(), in.data() + kTokensOffset, 4 * static_cast<size_t>(n));
  return SlotHeaderStatus::kOk;
}

namespace tiers_detail {
uint64_t payload_checksum_avx2(const std::byte* data, size_t bytes);
}

uint64_t payload_checksum(std::span<const std::byte> payload) {
  static const bool avx2 = has_avx2(best_available_isa());
  return avx2 ? tiers_detail::payload_checksum_avx2(payload.data(), payload.size())
              : XXH3_64bits(payload.data(), payload.size());
}

BlockHash kv_layout_fingerprint(uint64_t model_digest, const KVCacheSpec& spec, int num_layers,
                                HashAlgorithm hash_algorithm, const BlockHash& hash_root) {
  // Explicit little-endian fields, so equal configurations agree across builds and machines.
  std::byte buf[96] = {};
  size_t o = 0;
  auto add = [&](auto v) {
    std::memcpy(buf + o, &v, sizeof(v));
    o += sizeof(v);
  };
  add(uint64_t{0x70616765646b7631ull});  // "pagedkv1": the fingerprint's own version
  add(uint32_t{kDiskSlotFormatVersion});
  add(model_digest);
  add(static_cast<int32_t>(spec.kind));
  add(static_cast<int32_t>(spec.block_size));
  add(static_cast<int32_t>(spec.num_kv_heads));
  add(static_cast<int32_t>(spec.head_dim));
  add(static_cast<int32_t>(spec.dtype));
  add(static_cast<int32_t>(spec.sliding_window));
  add(static_cast<int32_t>(num_layers));
  add(static_cast<int32_t>(hash_algorithm));
  add(hash_root.lo);
  add(hash_root.hi);
  // int8 keys are stored Hadamard-rotated (storage/key_rotation.h): a block written unrotated by
  // an earlier build must never be read as rotated. Other layouts keep their fingerprints.
  if (keys_are_rotated(spec.dtype, spec.head_dim)) add(uint32_t{0x31746f72});  // "rot1"
  // int8 keys carry an f16 scale and offset where the scale was one f32 (storage/kv_quantize.h):
  // blocks of the symmetric layout must never be read as that.
  if (int8_keys_have_offsets(spec.dtype)) add(uint32_t{0x3166666f});  // "off1"
  const XXH128_hash_t h = XXH3_128bits(buf, o);
  return BlockHash{h.low64, h.high64};
}

}  // namespace pagedkv
