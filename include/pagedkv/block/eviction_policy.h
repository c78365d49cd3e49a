// Which free block the pool hands out next. The default (no policy object) is the pool's own
// FreeBlockQueue: least recently freed first, which is vLLM's LRU. Other policies (LFU, S3-FIFO,
// length-aware, ...) implement this interface and take over the free set; they thread their
// lists through the blocks' intrusive links, so they allocate nothing per operation either.
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "pagedkv/block/kv_cache_block.h"

namespace pagedkv {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  // Called once by the pool before any other call; `blocks` outlives the policy's use of it.
  virtual void attach(std::span<KVCacheBlock> blocks) = 0;
  // `b`'s ref count dropped to 0: it joins the free set (calls come in the caller's free order).
  // Must set b.in_free_queue.
  virtual void push(KVCacheBlock& b) = 0;
  // `b`'s ref count dropped to 0 and its content is worthless (a sliding-window block that left
  // the window, uncached): hand it out before anything else. Policies that already hand out
  // blocks without cached content first need nothing more than push().
  virtual void push_evict_first(KVCacheBlock& b) { push(b); }
  // `b` leaves the free set because a prefix hit reuses it. Must clear b.in_free_queue.
  virtual void remove(KVCacheBlock& b) = 0;
  // Removes and returns the block to hand out next; the free set is not empty.
  virtual KVCacheBlock& pop() = 0;
  virtual int size() const = 0;
  // A prefix lookup hit `b` (b.hit_count was already incremented).
  virtual void on_hit(KVCacheBlock& /*b*/) {}
  // Visits every block in the free set (invariant checker).
  virtual void for_each(const std::function<void(const KVCacheBlock&)>& f) const = 0;
};

}  // namespace pagedkv
