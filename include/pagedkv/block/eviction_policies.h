// Eviction policies besides the pool's built-in LRU (which is no policy object at all: the
// pool's FreeBlockQueue, vLLM's order). Each takes over the pool's free set through the
// EvictionPolicy interface, threads its lists through the blocks' intrusive links, and allocates
// nothing after attach(). All of them hand out blocks holding no cached content first: those
// cost nothing to reuse. They differ in which cached block they give up when none is empty:
//
//   lfu           fewest prefix hits first (ties: least recently freed). Keeps hot shared
//                 prefixes (system prompts, few-shot headers) through bursts of one-off long
//                 contexts; the Mooncake report (arXiv 2407.00079 v3, Table 1) compares it with
//                 LRU on its trace. Known weakness: counts never decay, so once-hot blocks squat.
//   s3fifo        S3-FIFO (Yang et al., SOSP'23) adapted to a free set: blocks never reused go
//                 to a small probation queue (10% of the pool) and are evicted from it first,
//                 leaving a ghost of their hash; blocks reused, or re-cached soon after their
//                 ghost was made, go to the main queue. Most trace blocks are used only once
//                 (76% of the conversation trace's ids), and S3-FIFO evicts those one-hit
//                 wonders quickly without letting them push out reused prefixes.
//   length-aware  the Mooncake report's LengthAwareCache, "similar to LFU but prioritizing
//                 cache blocks occurring later in requests": fewest hits first, and among equal
//                 hits the block deepest in its request first (a deep block is reused only by a
//                 request sharing everything before it). Needs each block's position in its
//                 request (set_position); unknown positions count as 0, which degrades to LFU.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "pagedkv/block/cached_block_map.h"
#include "pagedkv/block/eviction_policy.h"
#include "pagedkv/block/kv_cache_block.h"

namespace pagedkv {

// Intrusive FIFO lists of blocks, many lists over one block array (index links, no allocation).
class BlockLists {
 public:
  void attach(std::span<KVCacheBlock> blocks, size_t num_lists);
  void push_back(size_t list, KVCacheBlock& b);
  void remove(size_t list, KVCacheBlock& b);
  KVCacheBlock& pop_front(size_t list);
  KVCacheBlock& front(size_t list) const { return blocks_[static_cast<size_t>(heads_[list].head)]; }
  bool empty(size_t list) const { return heads_[list].head == kNoLink; }
  int size(size_t list) const { return heads_[list].size; }
  size_t num_lists() const { return heads_.size(); }
  template <typename F>
  void for_each(size_t list, F&& f) const {
    for (int32_t i = heads_[list].head; i != kNoLink; i = blocks_[static_cast<size_t>(i)].next_free)
      f(blocks_[static_cast<size_t>(i)]);
  }

 private:
  struct Ends {
    int32_t head = kNoLink;
    int32_t tail = kNoLink;
    int size = 0;
  };
  std::span<KVCacheBlock> blocks_;
  std::vector<Ends> heads_;
};

// Least frequently used, by KVCacheBlock::hit_count (clamped to kMaxCount), FIFO among equals.
class LfuPolicy final : public EvictionPolicy {
 public:
  static constexpr uint32_t kMaxCount = 62;  // counts above share one bucket

  std::string_view name() const override { return "lfu"; }
  void attach(std::span<KVCacheBlock> blocks) override;
  void push(KVCacheBlock& b) override;
  void remove(KVCacheBlock& b) override;
  KVCacheBlock& pop() override;
  int size() const override { return size_; }
  void for_each(const std::function<void(const KVCacheBlock&)>& f) const override;

 private:
  // List 0 holds blocks without cached content; list 1 + c holds cached blocks with c hits.
  BlockLists lists_;
  uint64_t nonempty_ = 0;  // bit i: list i is not empty
  int size_ = 0;
};

// S3-FIFO over the free set (see the header comment).
class S3FifoPolicy final : public EvictionPolicy {
 public:
  // small_fraction: probation queue target as a fraction of the pool's blocks.
  explicit S3FifoPolicy(double small_fraction = 0.1);
  std::string_view name() const override { return "s3fifo"; }
  void attach(std::span<KVCacheBlock> blocks) override;
  void push(KVCacheBlock& b) override;
  void remove(KVCacheBlock& b) override;
  KVCacheBlock& pop() override;
  int size() const override { return size_; }
  void for_each(const std::function<void(const KVCacheBlock&)>& f) const override;
  uint64_t ghost_hits() const { return ghost_hits_; }

 private:
  enum List : size_t { kEmpty = 0, kSmall = 1, kMain = 2 };
  void remember(const KVCacheBlock& b);  // adds b's hash to the ghost
  bool recall(const KVCacheBlock& b);  // true (and forgets it) if b's hash is a ghost

  double small_fraction_;
  int small_target_ = 1;
  BlockLists lists_;
  int size_ = 0;
  // Ghost: a ring of recently evicted probation hashes and an index hash -> ring slot.
  std::vector<BlockHash> ghost_ring_;
  size_t ghost_next_ = 0;
  size_t ghost_filled_ = 0;
  std::unique_ptr<CachedBlockMap> ghost_index_;
  uint64_t ghost_hits_ = 0;
};

// LFU with ties broken towards blocks deeper in their request (see the header comment).
class LengthAwarePolicy final : public EvictionPolicy {
 public:
  static constexpr uint32_t kMaxCount = 62;
  static constexpr int kDepthBuckets = 32;  // log2 buckets of the block's position

  std::string_view name() const override { return "length-aware"; }
  void attach(std::span<KVCacheBlock> blocks) override;
  void push(KVCacheBlock& b) override;
  void remove(KVCacheBlock& b) override;
  KVCacheBlock& pop() override;
  int size() const override { return size_; }
  void for_each(const std::function<void(const KVCacheBlock&)>& f) const override;

  // Block `id` holds position `index` (0-based block index) of the request that cached it.
  void set_position(BlockId id, int index) { position_[static_cast<size_t>(id.value)] = index; }

 private:
  size_t list_of(const KVCacheBlock& b) const;
  // List 0: no cached content. List 1 + c * kDepthBuckets + d: c hits, depth bucket d.
  BlockLists lists_;
  uint64_t count_nonempty_ = 0;  // bit c: some list with c hits is not empty
  std::vector<uint32_t> depth_nonempty_;  // per count, bit d: list (c, d) is not empty
  std::vector<int32_t> position_;
  int size_ = 0;
};

// "lru" (null: the pool's built-in queue), "lfu", "s3fifo", "length-aware". Throws ConfigError
// naming the valid choices for anything else.
std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name);
std::span<const std::string_view> eviction_policy_names();

}  // namespace pagedkv
