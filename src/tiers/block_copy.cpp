#include "pagedkv/tiers/block_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

void check_block(const KVArena& a, int32_t b, const char* what) {
  if (b < 0 || b >= a.num_blocks())
    throw UsageError(fmt::format("{}: block {} out of range [0, {})", what, b, a.num_blocks()));
}

size_t page_bytes(const KVArena& a) { return a.spec().bytes_per_block_per_layer() / 2; }

}  // namespace

void gather_block(const KVArena& arena, int32_t block, std::byte* out) {
  check_block(arena, block, "gather_block");
  const size_t page = page_bytes(arena);
  const size_t offset = static_cast<size_t>(block) * page;
  for (int l = 0; l < arena.num_layers(); ++l) {
    const KVLayerView v = arena.layer(l);
    std::memcpy(out, static_cast<const std::byte*>(v.key) + offset, page);
    std::memcpy(out + page, static_cast<const std::byte*>(v.value) + offset, page);
    out += 2 * page;
  }
}

void scatter_block(const std::byte* in, KVArena& arena, int32_t block) {
  check_block(arena, block, "scatter_block");
  const size_t page = page_bytes(arena);
  const size_t offset = static_cast<size_t>(block) * page;
  for (int l = 0; l < arena.num_layers(); ++l) {
    const KVLayerView v = arena.layer(l);
    std::memcpy(static_cast<std::byte*>(v.key) + offset, in, page);
    std::memcpy(static_cast<std::byte*>(v.value) + offset, in + page, page);
    in += 2 * page;
  }
}

size_t copy_block_runs(const KVArena& from, KVArena& to, std::span<const std::pair<int32_t, int32_t>> src_dst) {
  const KVCacheSpec& a = from.spec();
  const KVCacheSpec& b = to.spec();
  if (from.num_layers() != to.num_layers() || a.dtype != b.dtype || a.block_size != b.block_size ||
      a.num_kv_heads != b.num_kv_heads || a.head_dim != b.head_dim)
    throw UsageError(
        fmt::format("copy_block_runs: arenas differ (layers {} vs {}, block_size {} vs {}, kv heads {} vs {}, "
                    "head_dim {} vs {})",
                    from.num_layers(), to.num_layers(), a.block_size, b.block_size, a.num_kv_heads, b.num_kv_heads,
                    a.head_dim, b.head_dim));
  if (src_dst.empty()) return 0;
  std::vector<std::pair<int32_t, int32_t>> pairs(src_dst.begin(), src_dst.end());
  for (const auto& [s, d] : pairs) {
    check_block(from, s, "copy_block_runs source");
    check_block(to, d, "copy_block_runs destination");
  }
  std::sort(pairs.begin(), pairs.end());
  // Runs: [first, first + len) on both sides.
  struct Run {
    int32_t src, dst, len;
  };
  std::vector<Run> runs;
  for (const auto& [s, d] : pairs) {
    if (!runs.empty() && runs.back().src + runs.back().len == s && runs.back().dst + runs.back().len == d)
      ++runs.back().len;
    else runs.push_back(Run{s, d, 1});
  }
  const size_t page = page_bytes(from);
  for (int l = 0; l < from.num_layers(); ++l) {
    const KVLayerView src = from.layer(l);
    const KVLayerView dst = to.layer(l);
    for (const Run& r : runs) {
      const size_t n = page * static_cast<size_t>(r.len);
      std::memcpy(static_cast<std::byte*>(dst.key) + page * static_cast<size_t>(r.dst),
                  static_cast<const std::byte*>(src.key) + page * static_cast<size_t>(r.src), n);
      std::memcpy(static_cast<std::byte*>(dst.value) + page * static_cast<size_t>(r.dst),
                  static_cast<const std::byte*>(src.value) + page * static_cast<size_t>(r.src), n);
    }
  }
  return runs.size();
}

}  // namespace pagedkv
