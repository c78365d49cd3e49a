// Private to the paged-attention kernels: which context tokens make up each tile of a task, and
// where their slots are. Shared by the SIMD kernel (attention_tile_simd.h) and its scalar twin
// (attention_tile_scalar.cpp), so that both put the same tokens in the same tile: the int8 path
// rounds each tile's softmax weights to 8-bit codes, so a tile's tokens decide its rounding.
#pragma once

#include <algorithm>
#include <cstddef>

#include "attention_tile.h"

namespace pagedkv::attention_detail {
namespace {

constexpr size_t kStreamingBytes = size_t{1} << 20;  // a task's K+V bytes from which they stream (> L2)

// Whether a task reading `read_bytes` of each K and V slot streams from memory: its K/V are too
// large to stay in the L2.
inline bool streams_from_memory(const RowGroupTask& task, size_t read_bytes) {
  return 2 * read_bytes * static_cast<size_t>(task.token_end - task.token_begin) >= kStreamingBytes;
}

// Addresses of the slots (all KV heads of a token) holding tokens [first, first + n).
template <class T>
void locate_slots(const RowGroupTask& task, int first, int n, const T** keys, const T** values) {
  const KVLayerView& kv = *task.kv;
  const auto* key_base = static_cast<const char*>(kv.key);
  const auto* value_base = static_cast<const char*>(kv.value);
  const size_t slot_bytes = kv.slot_bytes();
  int block_index = first / kv.block_size;
  int offset = first % kv.block_size;
  size_t slot = static_cast<size_t>(task.block_table[block_index]) * static_cast<size_t>(kv.block_size) +
                static_cast<size_t>(offset);
  for (int j = 0; j < n; ++j) {
    keys[j] = reinterpret_cast<const T*>(key_base + slot * slot_bytes);
    values[j] = reinterpret_cast<const T*>(value_base + slot * slot_bytes);
    if (++offset == kv.block_size && j + 1 < n) {
      offset = 0;
      ++block_index;
      slot = static_cast<size_t>(task.block_table[block_index]) * static_cast<size_t>(kv.block_size);
    } else {
      ++slot;
    }
  }
}

// The order in which a task's context tokens are read, a tile at a time. Normally tile k is the
// kTileTokens consecutive tokens from token_begin + k * kTileTokens. When every row attends to
// the whole range (decode: no mask, so the order of tokens within the range does not matter) and
// the range crosses blocks that are not physically adjacent, the range is cut into 4 or 8 equal
// parts and tile k takes the next kTileTokens / parts tokens of each part, alternating between
// parts. The hardware prefetcher then follows several block streams at once instead of
// restarting at every scattered block: paged decode from DRAM 5-9% faster for fp32, 0-3% for
// fp16 with four parts (AMD EPYC, two threads, docs/benchmarks.md). Tasks that read wide slots
// (2 KiB or more of K per token: fp16 or fp32 rows of 8 x 128) take eight parts, three tokens
// each: fp32 paged 4-9 % faster again on AVX-512 and AVX2, fp16 5-10 % on AVX-512; int8 (1 KiB)
// was 5-10 % slower with eight and stays at four. Over one
// physically contiguous range the split costs instead (parts exactly 2^k bytes apart alias in the
// caches), so it stays consecutive there.
class TileWalk {
 public:
  static constexpr int kMaxStreams = 8;
  static constexpr size_t kWideSlotBytes = 2048;  // from here on, kMaxStreams parts
  static_assert(kTileTokens % kMaxStreams == 0 && kTileTokens % (kMaxStreams / 2) == 0);

  // streaming: the task's K/V are too large to stay in the L2, so the walk is about memory.
  // read_bytes: what the task reads of each K (or V) slot.
  TileWalk(const RowGroupTask& task, bool streaming, size_t read_bytes) : task_(task) {
    const int span = task.token_end - task.token_begin;
    streams_ = read_bytes >= kWideSlotBytes ? kMaxStreams : kMaxStreams / 2;
    interleaved_ = streaming && task.rows_share_range && span > streams_ && !physically_contiguous(task);
    if (interleaved_) {
      per_stream_ = kTileTokens / streams_;
      const int part = (span + streams_ - 1) / streams_;
      for (int s = 0; s < streams_; ++s) {
        next_[s] = std::min(task.token_end, task.token_begin + s * part);
        end_[s] = std::min(task.token_end, task.token_begin + (s + 1) * part);
      }
      num_tiles_ = (part + per_stream_ - 1) / per_stream_;
    } else {
      streams_ = 1;
      next_[0] = task.token_begin;
      end_[0] = task.token_end;
      num_tiles_ = (span + kTileTokens - 1) / kTileTokens;
    }
  }

  int num_tiles() const { return num_tiles_; }

  // The slots of the next tile (tiles come in order); returns how many.
  template <class T>
  int next(const T** keys, const T** values) {
    if (!interleaved_) {
      const int n = std::min(kTileTokens, end_[0] - next_[0]);
      if (n > 0) locate_slots(task_, next_[0], n, keys, values);
      next_[0] += n;
      return n;
    }
    const T* part_keys[kMaxStreams][kTileTokens / (kMaxStreams / 2)];
    const T* part_values[kMaxStreams][kTileTokens / (kMaxStreams / 2)];
    int counts[kMaxStreams];
    for (int s = 0; s < streams_; ++s) {
      counts[s] = std::min(per_stream_, end_[s] - next_[s]);
      if (counts[s] > 0) locate_slots(task_, next_[s], counts[s], part_keys[s], part_values[s]);
      next_[s] += counts[s];
    }
    int n = 0;
    for (int i = 0; i < per_stream_; ++i)
      for (int s = 0; s < streams_; ++s)
        if (i < counts[s]) {
          keys[n] = part_keys[s][i];
          values[n] = part_values[s][i];
          ++n;
        }
    return n;
  }

 private:
  static bool physically_contiguous(const RowGroupTask& task) {
    const int block_size = task.kv->block_size;
    const int first = task.token_begin / block_size, last = (task.token_end - 1) / block_size;
    for (int b = first; b < last; ++b)
      if (task.block_table[b + 1] != task.block_table[b] + 1) return false;
    return true;
  }

  const RowGroupTask& task_;
  bool interleaved_ = false;
  int streams_ = 1, per_stream_ = kTileTokens, num_tiles_ = 0;
  int next_[kMaxStreams] = {}, end_[kMaxStreams] = {};
};

}  // namespace
}  // namespace pagedkv::attention_detail
