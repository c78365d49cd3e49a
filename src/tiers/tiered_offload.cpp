// Offload: evicted device blocks and host LRU victims written down the tiers, write-through of
// newly computed blocks, and the flush of a clean shutdown.
#include "pagedkv/tiers/tiered_kv_cache.h"

#include <fmt/format.h>

#include <vector>

namespace pagedkv {

void TieredKVCache::on_device_uncache(const KVCacheBlock& b, RemovalReason why) {
  if (why == RemovalReason::kEvicted) on_device_evict(b);
  swaps_->on_device_uncache(b.id.value, pending_);  // lazy swap copies: copy now, whatever the reason
}

void TieredKVCache::on_device_evict(const KVCacheBlock& b) {
  if (b.hit_count < config_.offload_min_hits) {
    ++skipped_low_hits_;
    return;
  }
  const BlockPool& pool = manager_.pool();
  const BlockContentKey key = pool.cached_key(b.id);
  if (remote_) queue_remote_put(TierKind::kDevice, b.id.value, key);  // inclusive: also below
  if (host_) {
    TierStats& hs = host_->mutable_stats();
    SlotIndex& slots = host_->slots();
    if (auto s = slots.find(key)) {
      slots.touch(*s);
      ++hs.duplicates;
      return;
    }
    const int32_t slot = slots.allocate([this](int32_t v) { on_host_evict(v); });
    if (slot >= 0) {
      slots.cache(slot, key);
      pending_.device_to_host.push_back(MemoryCopy{b.id.value, slot, TransferPurpose::kOffload, RequestId{}});
      ++hs.stored_blocks;
      hs.stored_bytes += device_.bytes_per_block();
      return;
    }
    ++hs.dropped;  // every host slot pinned: try the disk directly
  }
  if (disk_) store_on_disk(TierKind::kDevice, b.id.value, key, TransferPurpose::kOffload);
}

void TieredKVCache::on_host_evict(int32_t slot) {
  TierStats& hs = host_->mutable_stats();
  ++hs.evictions;
  // The slot is refilled in the same batch, after its bytes are packed for the disk write.
  if (!disk_ || !disk_->writable() || disk_->slots().num_allocatable() <= swaps_->disk_slots_reserved()) return;
  const StoredBlockKey key = host_->slots().key(slot);
  if (store_on_disk(TierKind::kHost, slot, key.view(), TransferPurpose::kDemotion)) ++hs.demotions;
}

bool TieredKVCache::store_on_disk(TierKind source, int32_t source_block, const BlockContentKey& key,
                                  TransferPurpose purpose) {
  if (!disk_ || !disk_->writable()) return false;
  TierStats& ds = disk_->mutable_stats();
  SlotIndex& slots = disk_->slots();
  if (auto s = slots.find(key)) {
    slots.touch(*s);
    ++ds.duplicates;
    return true;
  }
  const int32_t slot = slots.allocate([&ds](int32_t) { ++ds.evictions; });
  if (slot < 0) {
    ++ds.dropped;
    return false;
  }
  slots.cache(slot, key);
  DiskWrite w;
  w.source = source;
  w.source_block = source_block;
  w.slot = slot;
  w.header.key = StoredBlockKey::from(key);
  w.header.sequence = disk_->next_sequence();
  w.purpose = purpose;
  pending_.disk_writes.push_back(std::move(w));
  ++ds.stored_blocks;
  ds.stored_bytes += disk_->slot_bytes();
  return true;
}

void TieredKVCache::write_through() {
  const bool to_disk = config_.write_through && disk_ && disk_->writable();
  const bool to_remote = remote_ && config_.remote_write_through;
  if (!to_disk && !to_remote) return;
  const BlockPool& pool = manager_.pool();
  for (const KVCacheBlock& b : pool.blocks()) {
    if (!b.has_hash) continue;
    const size_t i = static_cast<size_t>(b.id.value);
    const bool disk_due = to_disk && written_through_[i] != b.hash;
    const bool remote_due = to_remote && remote_written_[i] != b.hash;
    if (!disk_due && !remote_due) continue;
    const BlockContentKey key = pool.cached_key(b.id);
    if (disk_due) {
      written_through_[i] = b.hash;
      store_on_disk(TierKind::kDevice, b.id.value, key, TransferPurpose::kFlush);
    }
    if (remote_due) {
      remote_written_[i] = b.hash;
      queue_remote_put(TierKind::kDevice, b.id.value, key);
    }
  }
}

void TieredKVCache::flush_to_disk() {
  if (!disk_ || !disk_->writable()) return;
  submit_pending();
  constexpr size_t kBatchBlocks = 256;
  auto maybe_submit = [&] {
    if (pending_.size() >= kBatchBlocks) submit_pending();
  };
  // Oldest first, so that when the disk is the smallest tier the newest blocks survive.
  if (host_) {
    std::vector<int32_t> lru;
    host_->slots().for_each_lru([&](int32_t s) { lru.push_back(s); });
    for (int32_t s : lru) {
      const StoredBlockKey key = host_->slots().key(s);
      store_on_disk(TierKind::kHost, s, key.view(), TransferPurpose::kFlush);
      maybe_submit();
    }
  }
  const BlockPool& pool = manager_.pool();
  for (const KVCacheBlock& b : pool.blocks()) {
    if (!b.has_hash) continue;
    const BlockContentKey key = pool.cached_key(b.id);
    store_on_disk(TierKind::kDevice, b.id.value, key, TransferPurpose::kFlush);
    maybe_submit();
  }
  submit_pending();
  for (const TransferHandle& h : outstanding_) h.wait();
  poll();
}

void TieredKVCache::shutdown() {
  if (config_.flush_on_shutdown) flush_to_disk();
  drain();
  if (disk_ && disk_->available()) disk_->sync();
  if (remote_) remote_->flush(std::chrono::seconds(2));  // stores still queued, bounded
}

}  // namespace pagedkv
