#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/storage/cpu_isa.h"
#include "remote_value_copy_kernel.h"

namespace pagedkv {
namespace tiers_detail {

uint64_t copy_checksummed_portable(std::span<const ChecksummedPiece> pieces) {
  return copy_checksummed_kernel(pieces, [](std::byte* to, const std::byte* from, size_t n) -> const std::byte* {
    std::memcpy(to, from, n);
    return to;
  });
}

}  // namespace tiers_detail
namespace {

uint64_t copy_checksummed(std::span<const ChecksummedPiece> pieces, tiers_detail::CopyWrites writes) {
  static const bool avx2 = has_avx2(best_available_isa());
  return avx2 ? tiers_detail::copy_checksummed_avx2(pieces, writes) : tiers_detail::copy_checksummed_portable(pieces);
}

// The block's 2 x num_layers pages, in payload order, each paired with its place in the payload.
template <class Piece>
void for_each_page(const KVArena& arena, int32_t block, const char* what, Piece&& piece) {
  if (block < 0 || block >= arena.num_blocks())
    throw UsageError(fmt::format("{}: block {} out of range [0, {})", what, block, arena.num_blocks()));
  const size_t page = arena.spec().bytes_per_block_per_layer() / 2;
  const size_t offset = static_cast<size_t>(block) * page;
  size_t at = 0;
  for (int l = 0; l < arena.num_layers(); ++l) {
    const KVLayerView v = arena.layer(l);
    piece(static_cast<std::byte*>(v.key) + offset, at, page);
    piece(static_cast<std::byte*>(v.value) + offset, at + page, page);
    at += 2 * page;
  }
}

// Pieces of one block: a few dozen pages, kept on the stack for the usual layer counts.
constexpr size_t kInlinePieces = 256;

template <class MakePiece>
uint64_t copy_block(const KVArena& arena, int32_t block, const char* what, tiers_detail::CopyWrites writes,
                    MakePiece&& make) {
  ChecksummedPiece inline_pieces[kInlinePieces];
  std::vector<ChecksummedPiece> heap;
  const size_t n = 2 * static_cast<size_t>(arena.num_layers());
  ChecksummedPiece* pieces = inline_pieces;
  if (n > kInlinePieces) {
    heap.resize(n);
    pieces = heap.data();
  }
  size_t i = 0;
  for_each_page(arena, block, what,
                [&](std::byte* page, size_t at, size_t bytes) { pieces[i++] = make(page, at, bytes); });
  return copy_checksummed(std::span(pieces, n), writes);
}

}  // namespace

// A packed value is read next by the store lane's send, from the cache when the queue is short.
uint64_t gather_block_checksummed(const KVArena& arena, int32_t block, std::byte* payload) {
  return copy_block(arena, block, "gather_block_checksummed", tiers_detail::CopyWrites::kThroughCache,
                    [&](std::byte* page, size_t at, size_t bytes) {
                      return ChecksummedPiece{page, payload + at, bytes};
                    });
}

// A loaded block is one of a prefix's many, read when attention reaches it: streamed.
uint64_t scatter_block_checksummed(const std::byte* payload, KVArena& arena, int32_t block) {
  return copy_block(arena, block, "scatter_block_checksummed", tiers_detail::CopyWrites::kStreaming,
                    [&](std::byte* page, size_t at, size_t bytes) {
                      return ChecksummedPiece{payload + at, page, bytes};
                    });
}

}  // namespace pagedkv
