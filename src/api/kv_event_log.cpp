#include "pagedkv/api/kv_event_log.h"

#include <random>

#include "pagedkv/core/error.h"

namespace pagedkv::api {
namespace {

uint64_t random_epoch() {
  std::random_device rd;
  const uint64_t e = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return e == 0 ? 1 : e;
}

constexpr size_t kMedia = kNumMedia;

}  // namespace

PrefixHashing prefix_hashing_for(const KVCacheConfig& cache, std::string algorithm, uint64_t seed) {
  PrefixHashing h;
  h.block_size = cache.block_size();
  h.algorithm = std::move(algorithm);
  h.seed = seed;
  h.routing_group = -1;
  for (size_t g = 0; g < cache.groups.size(); ++g) {
    const KVCacheSpec& s = cache.groups[g].spec;
    h.groups.push_back(
        KVGroupInfo{s.kind, s.kind == AttentionKind::kSlidingWindow ? s.sliding_window : 0, s.block_size});
    if (h.routing_group < 0 && s.kind == AttentionKind::kFull) h.routing_group = static_cast<int>(g);
  }
  if (h.routing_group < 0) h.routing_group = 0;
  return h;
}

KVEventLog::KVEventLog(size_t capacity, uint64_t epoch)
    : capacity_(capacity), epoch_(epoch == 0 ? random_epoch() : epoch) {
  if (capacity_ == 0) throw ConfigError("KVEventLog: capacity must be at least 1");
}

void KVEventLog::record(bool present, const HashInGroup& key, Medium medium) {
  records_.push_back({++last_seq_, present, key.hash, medium, key.group});
  if (records_.size() > capacity_) records_.pop_front();
}

void KVEventLog::append(std::span<const KVEvent> events) {
  std::lock_guard lock(mutex_);
  for (const KVEvent& e : events) {
    switch (e.kind) {
      case KVEventKind::kBlockStored: {
        const HashInGroup key{e.hash, e.group};
        uint32_t& n = copies_[key].count[static_cast<size_t>(e.medium)];
        if (n++ == 0) record(true, key, e.medium);
        break;
      }
      case KVEventKind::kBlockRemoved: {
        const HashInGroup key{e.hash, e.group};
        auto it = copies_.find(key);
        if (it == copies_.end()) break;  // never seen stored: nothing to retract
        uint32_t& n = it->second.count[static_cast<size_t>(e.medium)];
        if (n == 0) break;
        if (--n == 0) {
          record(false, key, e.medium);
          const uint32_t* c = it->second.count;
          if (c[0] == 0 && c[1] == 0 && c[2] == 0) copies_.erase(it);
        }
        break;
      }
      case KVEventKind::kAllBlocksCleared:  // the device pool's prefix cache was reset
        for (auto it = copies_.begin(); it != copies_.end();) {
          uint32_t* c = it->second.count;
          if (c[0] > 0) {
            c[0] = 0;
            record(false, it->first, Medium::kDevice);
          }
          if (c[1] == 0 && c[2] == 0) it = copies_.erase(it);
          else ++it;
        }
        break;
    }
  }
}

KVEventsPage KVEventLog::read(uint64_t epoch, uint64_t since, size_t max_events) const {
  std::lock_guard lock(mutex_);
  KVEventsPage page;
  page.epoch = epoch_;
  const uint64_t first_kept = records_.empty() ? last_seq_ + 1 : records_.front().seq;
  // The reader can continue with events only if it knows this epoch and nothing after `since`
  // has been dropped; anything else (a new reader, a restart, a reader too far behind, a number
  // from the future) starts again from a snapshot.
  if (epoch != epoch_ || since + 1 < first_kept || since > last_seq_) {
    page.snapshot = true;
    page.last_seq = last_seq_;
    page.blocks.reserve(copies_.size());
    for (const auto& [key, copies] : copies_) {
      MediumMask mask = 0;
      for (size_t m = 0; m < kMedia; ++m)
        if (copies.count[m] > 0) mask |= medium_bit(static_cast<Medium>(m));
      if (mask != 0) page.blocks.push_back(KVSnapshotBlock{key.hash, mask, key.group});
    }
    return page;
  }
  const size_t from = static_cast<size_t>(since + 1 - first_kept);
  const size_t available = records_.size() - from;
  const size_t n = std::min(available, max_events);
  page.events.assign(records_.begin() + static_cast<ptrdiff_t>(from),
                     records_.begin() + static_cast<ptrdiff_t>(from + n));
  page.more = n < available;
  page.last_seq = n > 0 ? page.events.back().seq : since;
  return page;
}

size_t KVEventLog::num_present() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [key, copies] : copies_)
    for (size_t m = 0; m < kMedia; ++m) n += copies.count[m] > 0;
  return n;
}

size_t KVEventLog::num_records() const {
  std::lock_guard lock(mutex_);
  return records_.size();
}

}  // namespace pagedkv::api
