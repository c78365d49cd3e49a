#include "pagedkv/block/eviction_policies.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "pagedkv/core/error.h"

namespace pagedkv {

// ---- BlockLists -------------------------------------------------------------------------------

void BlockLists::attach(std::span<KVCacheBlock> blocks, size_t num_lists) {
  blocks_ = blocks;
  heads_.assign(num_lists, Ends{});
}

void BlockLists::push_back(size_t list, KVCacheBlock& b) {
  Ends& e = heads_[list];
  b.prev_free = e.tail;
  b.next_free = kNoLink;
  if (e.tail != kNoLink) blocks_[static_cast<size_t>(e.tail)].next_free = b.id.value;
  else e.head = b.id.value;
  e.tail = b.id.value;
  ++e.size;
  b.in_free_queue = true;
  b.policy_tag = static_cast<uint32_t>(list);
}

void BlockLists::remove(size_t list, KVCacheBlock& b) {
  Ends& e = heads_[list];
  if (b.prev_free != kNoLink) blocks_[static_cast<size_t>(b.prev_free)].next_free = b.next_free;
  else e.head = b.next_free;
  if (b.next_free != kNoLink) blocks_[static_cast<size_t>(b.next_free)].prev_free = b.prev_free;
  else e.tail = b.prev_free;
  b.prev_free = b.next_free = kNoLink;
  --e.size;
  b.in_free_queue = false;
}

KVCacheBlock& BlockLists::pop_front(size_t list) {
  KVCacheBlock& b = blocks_[static_cast<size_t>(heads_[list].head)];
  remove(list, b);
  return b;
}

// ---- LFU --------------------------------------------------------------------------------------

void LfuPolicy::attach(std::span<KVCacheBlock> blocks) {
  lists_.attach(blocks, 2 + kMaxCount);
  static_assert(2 + kMaxCount <= 64, "one bit per list");
  nonempty_ = 0;
  size_ = 0;
}

void LfuPolicy::push(KVCacheBlock& b) {
  const size_t list = b.has_hash ? 1 + std::min(b.hit_count, kMaxCount) : 0;
  lists_.push_back(list, b);
  nonempty_ |= uint64_t{1} << list;
  ++size_;
}

void LfuPolicy::remove(KVCacheBlock& b) {
  const size_t list = b.policy_tag;
  lists_.remove(list, b);
  if (lists_.empty(list)) nonempty_ &= ~(uint64_t{1} << list);
  --size_;
}

KVCacheBlock& LfuPolicy::pop() {
  // Lowest list first: blocks without content, then the fewest hits.
  const auto list = static_cast<size_t>(std::countr_zero(nonempty_));
  KVCacheBlock& b = lists_.pop_front(list);
  if (lists_.empty(list)) nonempty_ &= ~(uint64_t{1} << list);
  --size_;
  return b;
}

void LfuPolicy::for_each(const std::function<void(const KVCacheBlock&)>& f) const {
  for (size_t l = 0; l < lists_.num_lists(); ++l) lists_.for_each(l, f);
}

// ---- S3-FIFO ----------------------------------------------------------------------------------

S3FifoPolicy::S3FifoPolicy(double small_fraction) : small_fraction_(small_fraction) {
  if (!(small_fraction > 0 && small_fraction < 1))
    throw ConfigError(fmt::format("s3fifo: the small queue fraction must be in (0, 1), got {}", small_fraction));
}

void S3FifoPolicy::attach(std::span<KVCacheBlock> blocks) {
  lists_.attach(blocks, 3);
  size_ = 0;
  small_target_ = std::max(1, static_cast<int>(std::lround(small_fraction_ * static_cast<double>(blocks.size()))));
  // The ghost remembers about as many evictions as the main queue holds blocks.
  const size_t ghost_capacity = std::max<size_t>(1, blocks.size() - static_cast<size_t>(small_target_));
  ghost_ring_.assign(ghost_capacity, BlockHash{});
  ghost_next_ = 0;
  ghost_filled_ = 0;
  ghost_index_ = std::make_unique<CachedBlockMap>(ghost_capacity);
  ghost_hits_ = 0;
}

namespace {
BlockHash ghost_key(const KVCacheBlock& b) {
  return BlockHash{b.hash.lo ^ (static_cast<uint64_t>(b.group) * 0x9E3779B97F4A7C15ull), b.hash.hi};
}
}  // namespace

void S3FifoPolicy::remember(const KVCacheBlock& b) {
  if (!b.has_hash) return;
  const BlockHash key = ghost_key(b);
  if (ghost_filled_ == ghost_ring_.size()) {
    // The oldest ghost falls out, unless its hash was remembered again more recently.
    const BlockHash& old = ghost_ring_[ghost_next_];
    if (ghost_index_->find(old) == static_cast<int32_t>(ghost_next_)) ghost_index_->erase(old);
  } else {
    ++ghost_filled_;
  }
  ghost_ring_[ghost_next_] = key;
  ghost_index_->assign(key, static_cast<int32_t>(ghost_next_));
  ghost_next_ = (ghost_next_ + 1) % ghost_ring_.size();
}

bool S3FifoPolicy::recall(const KVCacheBlock& b) {
  const BlockHash key = ghost_key(b);
  if (ghost_index_->find(key) < 0) return false;
  ghost_index_->erase(key);  // the ring slot is left behind and skipped when it ages out
  ++ghost_hits_;
  return true;
}

void S3FifoPolicy::push(KVCacheBlock& b) {
  List list = kEmpty;
  if (b.has_hash) list = (b.hit_count > 0 || recall(b)) ? kMain : kSmall;
  lists_.push_back(list, b);
  ++size_;
}

void S3FifoPolicy::remove(KVCacheBlock& b) {
  lists_.remove(b.policy_tag, b);
  --size_;
}

KVCacheBlock& S3FifoPolicy::pop() {
  --size_;
  if (!lists_.empty(kEmpty)) return lists_.pop_front(kEmpty);
  if (!lists_.empty(kSmall) && (lists_.size(kSmall) >= small_target_ || lists_.empty(kMain))) {
    KVCacheBlock& b = lists_.pop_front(kSmall);
    remember(b);
    return b;
  }
  return lists_.pop_front(kMain);
}

void S3FifoPolicy::for_each(const std::function<void(const KVCacheBlock&)>& f) const {
  for (size_t l = 0; l < lists_.num_lists(); ++l) lists_.for_each(l, f);
}

// ---- length-aware -----------------------------------------------------------------------------

void LengthAwarePolicy::attach(std::span<KVCacheBlock> blocks) {
  static_assert(kMaxCount + 1 <= 64 && kDepthBuckets <= 32, "one bit per count and per depth bucket");
  lists_.attach(blocks, 1 + (kMaxCount + 1) * kDepthBuckets);
  count_nonempty_ = 0;
  depth_nonempty_.assign(kMaxCount + 1, 0);
  position_.assign(blocks.size(), 0);
  size_ = 0;
}

size_t LengthAwarePolicy::list_of(const KVCacheBlock& b) const {
  if (!b.has_hash) return 0;
  const uint32_t count = std::min(b.hit_count, kMaxCount);
  const auto pos = static_cast<uint32_t>(std::max(0, position_[static_cast<size_t>(b.id.value)]));
  const auto depth = std::min<uint32_t>(static_cast<uint32_t>(std::bit_width(pos)), kDepthBuckets - 1);
  return 1 + count * kDepthBuckets + depth;
}

void LengthAwarePolicy::push(KVCacheBlock& b) {
  const size_t list = list_of(b);
  lists_.push_back(list, b);
  if (list > 0) {
    const size_t count = (list - 1) / kDepthBuckets, depth = (list - 1) % kDepthBuckets;
    count_nonempty_ |= uint64_t{1} << count;
    depth_nonempty_[count] |= uint32_t{1} << depth;
  }
  ++size_;
}

void LengthAwarePolicy::remove(KVCacheBlock& b) {
  const size_t list = b.policy_tag;
  lists_.remove(list, b);
  if (list > 0 && lists_.empty(list)) {
    const size_t count = (list - 1) / kDepthBuckets, depth = (list - 1) % kDepthBuckets;
    depth_nonempty_[count] &= ~(uint32_t{1} << depth);
    if (depth_nonempty_[count] == 0) count_nonempty_ &= ~(uint64_t{1} << count);
  }
  --size_;
}

KVCacheBlock& LengthAwarePolicy::pop() {
  size_t list = 0;
  if (lists_.empty(0)) {
    const auto count = static_cast<size_t>(std::countr_zero(count_nonempty_));  // fewest hits
    const auto depth = static_cast<size_t>(31 - std::countl_zero(depth_nonempty_[count]));  // deepest
    list = 1 + count * kDepthBuckets + depth;
  }
  KVCacheBlock& b = lists_.front(list);
  remove(b);
  return b;
}

void LengthAwarePolicy::for_each(const std::function<void(const KVCacheBlock&)>& f) const {
  for (size_t l = 0; l < lists_.num_lists(); ++l) lists_.for_each(l, f);
}

// ---- factory ----------------------------------------------------------------------------------

namespace {
constexpr std::array<std::string_view, 4> kPolicyNames = {"lru", "lfu", "s3fifo", "length-aware"};
}

std::span<const std::string_view> eviction_policy_names() { return kPolicyNames; }

std::unique_ptr<EvictionPolicy> make_eviction_policy(std::string_view name) {
  if (name == "lru") return nullptr;
  if (name == "lfu") return std::make_unique<LfuPolicy>();
  if (name == "s3fifo" || name == "s3-fifo") return std::make_unique<S3FifoPolicy>();
  if (name == "length-aware" || name == "length_aware" || name == "lengthaware")
    return std::make_unique<LengthAwarePolicy>();
  throw ConfigError(fmt::format("unknown eviction policy '{}' (choose lru, lfu, s3fifo or length-aware)", name));
}

}  // namespace pagedkv
