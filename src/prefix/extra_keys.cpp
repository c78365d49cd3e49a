#include "pagedkv/prefix/extra_keys.h"

#include <bit>
#include <cstring>

namespace pagedkv {
namespace {

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  static_assert(std::endian::native == std::endian::little, "pagedkv serializes little-endian");
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

}  // namespace

void append_extra_keys(const PrefixKeys& keys, int block_index, int block_size, std::vector<std::byte>& out) {
  if (keys.lora_id != 0) {
    out.push_back(std::byte{'L'});
    put<uint64_t>(out, keys.lora_id);
  }
  const int64_t start = static_cast<int64_t>(block_index) * block_size;
  const int64_t end = start + block_size;
  for (const MultiModalInput& mm : keys.mm_inputs) {
    if (mm.offset >= end) break;  // sorted by offset
    if (static_cast<int64_t>(mm.offset) + mm.length <= start) continue;
    out.push_back(std::byte{'M'});
    put<uint64_t>(out, mm.hash.lo);
    put<uint64_t>(out, mm.hash.hi);
    put<int32_t>(out, mm.offset);
  }
  if (block_index == 0 && !keys.cache_salt.empty()) {
    out.push_back(std::byte{'S'});
    put<uint32_t>(out, static_cast<uint32_t>(keys.cache_salt.size()));
    const auto* p = reinterpret_cast<const std::byte*>(keys.cache_salt.data());
    out.insert(out.end(), p, p + keys.cache_salt.size());
  }
}

}  // namespace pagedkv
