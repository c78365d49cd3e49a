// An intrusive doubly-linked list of free blocks threaded through the block array
// (vLLM's FreeKVCacheBlockQueue). No per-node allocation; every operation is O(1).
// Order is eviction order: the front is the least recently freed block.
#pragma once

#include <span>

#include "pagedkv/block/kv_cache_block.h"

namespace pagedkv {

class FreeBlockQueue {
 public:
  // The queue links blocks of `blocks`; the span must outlive the queue.
  explicit FreeBlockQueue(std::span<KVCacheBlock> blocks) : blocks_(blocks) {}

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t front() const { return head_; }  // kNoLink when empty
  int32_t back() const { return tail_; }

  void push_back(KVCacheBlock& b) {
    b.prev_free = tail_;
    b.next_free = kNoLink;
    if (tail_ != kNoLink) blocks_[tail_].next_free = b.id.value;
    else head_ = b.id.value;
    tail_ = b.id.value;
    b.in_free_queue = true;
    ++size_;
  }

  // Joins at the front: the next block handed out (a block whose content no lookup can use).
  void push_front(KVCacheBlock& b) {
    b.prev_free = kNoLink;
    b.next_free = head_;
    if (head_ != kNoLink) blocks_[head_].prev_free = b.id.value;
    else tail_ = b.id.value;
    head_ = b.id.value;
    b.in_free_queue = true;
    ++size_;
  }

  // Removes and returns the front block (the queue must not be empty).
  KVCacheBlock& pop_front() {
    KVCacheBlock& b = blocks_[head_];
    remove(b);
    return b;
  }

  // Unlinks `b` from anywhere in the queue (it must be in this queue).
  void remove(KVCacheBlock& b) {
    if (b.prev_free != kNoLink) blocks_[b.prev_free].next_free = b.next_free;
    else head_ = b.next_free;
    if (b.next_free != kNoLink) blocks_[b.next_free].prev_free = b.prev_free;
    else tail_ = b.prev_free;
    b.prev_free = b.next_free = kNoLink;
    b.in_free_queue = false;
    --size_;
  }

  // Calls f(block) front to back; f must not modify the queue.
  template <typename F>
  void for_each(F&& f) const {
    for (int32_t i = head_; i != kNoLink; i = blocks_[i].next_free) f(blocks_[i]);
  }

 private:
  std::span<KVCacheBlock> blocks_;
  int32_t head_ = kNoLink;
  int32_t tail_ = kNoLink;
  int size_ = 0;
};

}  // namespace pagedkv
