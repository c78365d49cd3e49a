#include "pagedkv/tiers/tiered_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

// A probe asks about at most this many blocks (a 4096-token prefix at block size 16).
constexpr int kMaxProbeBlocks = 256;

// Private manager requests that hold promoted blocks while their bytes are in flight. Engine
// request ids count up from 1 and parallel-sample children from 2^62: these never collide.
constexpr uint64_t kHolderIdBase = 1ull << 63;

// The key a swapped-out block carries on disk: the owner and the block's index, so a swap-in
// verifies it reads its own block.
StoredBlockKey swap_key(RequestId owner, int index, int block_size) {
  StoredBlockKey k;
  k.hash = BlockHash{owner.value, static_cast<uint64_t>(index)};
  k.tokens.assign(static_cast<size_t>(block_size), 0);
  return k;
}

}  // namespace

TieredKVCache::TieredKVCache(TierConfig config, KVCacheManager& manager, KVArena& device, uint64_t model_digest,
                             size_t swap_bytes)
    : config_(std::move(config)), manager_(manager), device_(device) {
  if (manager_.num_groups() != 1)
    throw ConfigError(fmt::format("KV tiers support one KV-cache group, the manager has {}", manager_.num_groups()));
  if (device_.num_blocks() < manager_.pool().num_blocks())
    throw ConfigError(fmt::format("the device arena has {} blocks but the pool {}", device_.num_blocks(),
                                  manager_.pool().num_blocks()));
  fingerprint_ = kv_layout_fingerprint(model_digest, device_.spec(), device_.num_layers(),
                                       manager_.hasher().algorithm(), manager_.hasher().root());
  const size_t bpb = device_.bytes_per_block();
  const size_t host_slots = (config_.host_cache_bytes + swap_bytes) / bpb;
  if (host_slots > 0)
    host_ = std::make_unique<HostTier>(device_.spec(), device_.num_layers(),
                                       static_cast<int>(std::min<size_t>(host_slots, size_t{1} << 30)));
  if (!config_.disk_cache_dir.empty()) {
    DiskTierOptions o;
    o.dir = config_.disk_cache_dir;
    o.capacity_bytes = config_.disk_cache_bytes;
    o.fingerprint = fingerprint_;
    o.spec = device_.spec();
    o.num_layers = device_.num_layers();
    o.use_io_uring = config_.use_io_uring;
    o.use_o_direct = config_.use_o_direct;
    o.log_degraded = config_.log_degraded;
    o.fault_injection = config_.disk_fault_injection;
    o.write_retry_initial = config_.disk_write_retry_initial;
    o.write_retry_max = config_.disk_write_retry_max;
    disk_ = std::make_unique<DiskTier>(std::move(o));
  }
  if (config_.remote_store) {
    if (config_.remote_key_prefix.empty() ||
        config_.remote_key_prefix.find_first_of(" \t\r\n") != std::string::npos)
      throw ConfigError(fmt::format("--remote-cache-prefix must be a non-empty name without spaces, got '{}'",
                                    config_.remote_key_prefix));
    if (config_.remote_min_blocks < 1)
      throw ConfigError(fmt::format("remote_min_blocks must be at least 1, got {}", config_.remote_min_blocks));
    RemoteTierOptions o;
    o.connect = config_.remote_store;
    o.key_prefix = config_.remote_key_prefix;
    o.description = config_.remote_description.empty() ? "remote store" : config_.remote_description;
    o.fingerprint = fingerprint_;
    o.max_queued_store_bytes = std::max(config_.remote_max_queued_bytes, bpb);
    o.log_degraded = config_.log_degraded;
    remote_ = std::make_unique<RemoteTier>(std::move(o), device_);
    remote_written_.resize(static_cast<size_t>(manager_.pool().num_blocks()));
  }
  transfers_ = std::make_unique<TransferEngine>(device_, host_ ? &host_->arena() : nullptr, disk_.get(), remote_.get());
  written_through_.resize(static_cast<size_t>(manager_.pool().num_blocks()));
  manager_.pool().set_uncache_listener([this](const KVCacheBlock& b, RemovalReason why) { on_device_uncache(b, why); });
}

TieredKVCache::~TieredKVCache() {
  manager_.pool().set_uncache_listener({});
  try {
    submit_pending();
    for (const TransferHandle& h : outstanding_) h.wait();
    poll();
    // Remote loads write into device blocks held by promotions: let them finish (bounded by the
    // store's timeouts) so their holders are released.
    while (remote_ && remote_->fetches_in_flight() > 0) {
      remote_->wait_for_fetch(std::chrono::steady_clock::now() + std::chrono::seconds(1));
      poll();
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "pagedkv: tiers: error while draining transfers at exit: {}\n", e.what());
  }
}

BlockContentKey TieredKVCache::key_of(const Request& r, int i, int32_t parent_block) const {
  const size_t idx = static_cast<size_t>(i);
  const size_t bs = static_cast<size_t>(manager_.block_size());
  BlockContentKey k;
  k.hash = r.block_hashes[idx];
  k.parent = i == 0 ? manager_.hasher().root() : r.block_hashes[idx - 1];
  k.tokens = std::span<const TokenId>(r.tokens).subspan(idx * bs, bs);
  k.extra_digest = r.block_extra_digest(idx);
  k.group = 0;
  k.parent_block = parent_block;
  return k;
}

// ---- offload ----------------------------------------------------------------------------------

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
  if (!disk_ || !disk_->writable() || disk_->slots().num_allocatable() <= disk_reserve_) return;
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

// ---- transfers --------------------------------------------------------------------------------

TransferHandle TieredKVCache::submit_pending() {
  if (pending_.empty()) return {};
  TransferHandle h = transfers_->submit(std::move(pending_));
  pending_ = TransferBatch{};
  outstanding_.push_back(h);
  return h;
}

void TieredKVCache::poll() {
  // Batches finish out of order (a memory-only batch overtakes an earlier one waiting on the
  // disk); their effects on the metadata commute: each only releases its own pins.
  for (size_t i = 0; i < outstanding_.size();) {
    if (outstanding_[i].done()) {
      const TransferHandle h = outstanding_[i];
      outstanding_.erase(outstanding_.begin() + static_cast<ptrdiff_t>(i));
      apply(h.batch());
    } else {
      ++i;
    }
  }
  if (remote_) apply_remote(remote_->take_finished());
}

void TieredKVCache::before_forward() {
  submit_pending();
  for (const TransferHandle& h : outstanding_) h.wait_memory();
  poll();
}

void TieredKVCache::drain() {
  submit_pending();
  for (const TransferHandle& h : outstanding_) h.wait();
  poll();
}

bool TieredKVCache::wait_for_progress() {
  submit_pending();
  for (const TransferHandle& h : outstanding_) {
    if (h.done()) continue;
    h.wait();
    poll();
    return true;
  }
  poll();
  if (remote_ && remote_->fetches_in_flight() > 0) {
    // A probe or a load for a waiting request: wait for it, at most as long as a probe may take.
    remote_->wait_for_fetch(std::chrono::steady_clock::now() + config_.remote_probe_wait);
    poll();
    return true;
  }
  return false;
}

void TieredKVCache::on_step_begin() {
  poll();
  if (config_.write_through || (remote_ && config_.remote_write_through)) write_through();
}

void TieredKVCache::apply(const TransferBatch& b) {
  const size_t bpb = device_.bytes_per_block();
  std::vector<RequestId> promotions_touched;
  auto promotion_result = [&](RequestId owner, int32_t device_block, bool ok) {
    promotion_block_done(owner, device_block, ok, promotions_touched);
  };
  for (const DiskWrite& w : b.disk_writes) {
    TierStats& ds = disk_->mutable_stats();
    if (!w.ok) {
      ++ds.io_errors;
      disk_->write_failed(fmt::format("a write failed ({})", std::strerror(w.error)));
    } else {
      disk_->write_succeeded();
    }
    if (w.purpose == TransferPurpose::kSwap) {
      if (!w.ok)
        if (auto it = swaps_.find(w.owner); it != swaps_.end()) it->second.failed = true;
      continue;  // the slot stays pinned by the swapped-out request
    }
    if (!w.ok) disk_->slots().uncache(w.slot);
    disk_->slots().unpin(w.slot);
  }
  for (const MemoryCopy& c : b.device_to_host)
    if (c.purpose != TransferPurpose::kSwap) host_->slots().unpin(c.dst);
  for (const MemoryCopy& c : b.host_to_device) {
    TierStats& hs = host_->mutable_stats();
    host_->slots().unpin(c.src);
    ++hs.loaded_blocks;
    hs.loaded_bytes += bpb;
    if (c.purpose == TransferPurpose::kSwap) {
      ++hs.swapped_in_blocks;
      if (auto it = swaps_.find(c.owner); it != swaps_.end()) --it->second.in_flight;
    } else {
      promotion_result(c.owner, c.dst, true);
    }
  }
  for (const DiskRead& r : b.disk_reads) {
    TierStats& ds = disk_->mutable_stats();
    const bool ok = r.result == ReadResult::kOk;
    if (ok) {
      ++ds.loaded_blocks;
      ds.loaded_bytes += bpb;
    } else if (r.result == ReadResult::kIoError) {
      ++ds.io_errors;
    } else {
      ++ds.corrupt_blocks;  // checksum, key or short read: a miss, and the slot is reclaimed
    }
    if (!ok && disk_->slots().is_cached(r.slot)) {
      disk_->slots().uncache(r.slot);
      if (r.result != ReadResult::kIoError) disk_->invalidate_on_disk(r.slot);
    }
    disk_->slots().unpin(r.slot);
    if (r.purpose == TransferPurpose::kSwap) {
      if (auto it = swaps_.find(r.owner); it != swaps_.end()) {
        --it->second.in_flight;
        if (!ok) it->second.failed = true;
        else ++ds.swapped_in_blocks;
      }
    } else {
      promotion_result(r.owner, r.device_block, ok);
    }
  }
  for (RequestId id : promotions_touched) finish_promotion(id);
}

void TieredKVCache::promotion_block_done(RequestId owner, int32_t device_block, bool ok,
                                         std::vector<RequestId>& finished) {
  auto it = promotions_.find(owner);
  if (it == promotions_.end()) return;
  Promotion& p = it->second;
  const auto table = manager_.get_block_ids(p.holder.id);
  auto pos = std::find(table.begin(), table.end(), BlockId{device_block});
  if (pos != table.end()) {
    const size_t k = static_cast<size_t>(pos - table.begin()) - static_cast<size_t>(p.first_block);
    if (k < p.source.size() && !ok) p.source[k] = TierKind::kDevice;  // kDevice marks "failed"
  }
  if (--p.in_flight == 0) finished.push_back(owner);
}

void TieredKVCache::apply_remote(std::vector<RemoteFetchJob> jobs) {
  std::vector<RequestId> finished;
  for (RemoteFetchJob& job : jobs) {
    if (job.kind == RemoteFetchJob::Kind::kProbe) {
      // The request may have been admitted (or aborted) since, or asked again: then it is stale.
      auto it = remote_probes_.find(job.owner);
      if (it != remote_probes_.end() && it->second.hashes == job.probe) {
        it->second.present = std::move(job.present);
        it->second.done = true;
      }
      continue;
    }
    auto probe = remote_probes_.find(job.owner);
    for (const RemoteLoad& l : job.loads) {
      const bool ok = l.result == RemoteLoadResult::kOk;
      // A block that failed (corrupt, vanished, link down) is no longer "present" for this
      // request: the next lookup computes from it instead of loading it again.
      if (!ok && probe != remote_probes_.end())
        for (size_t k = 0; k < probe->second.hashes.size(); ++k)
          if (probe->second.hashes[k] == l.expected.hash) probe->second.present[k] = 0;
      promotion_block_done(job.owner, l.device_block, ok, finished);
    }
  }
  for (RequestId id : finished) finish_promotion(id);
}

void TieredKVCache::queue_remote_put(TierKind source, int32_t source_block, const BlockContentKey& key) {
  if (!remote_->should_store(key.hash)) return;
  pending_.remote_puts.push_back(RemotePut{source, source_block, StoredBlockKey::from(key)});
}

bool TieredKVCache::extend_from_remote(const Request& r, int next, int max_blocks, std::vector<Location>& found) {
  const auto now = std::chrono::steady_clock::now();
  auto it = remote_probes_.find(r.id);
  if (it == remote_probes_.end()) {
    // The cost rule, and no round trip while the link is known down.
    if (max_blocks - next < config_.remote_min_blocks || !remote_->available()) return true;
    RemoteProbe p;
    p.first = next;
    const int n = std::min(max_blocks - next, kMaxProbeBlocks);
    p.hashes.assign(r.block_hashes.begin() + next, r.block_hashes.begin() + next + n);
    p.deadline = now + config_.remote_probe_wait;
    RemoteFetchJob job;
    job.kind = RemoteFetchJob::Kind::kProbe;
    job.owner = r.id;
    job.probe = p.hashes;
    remote_->submit(std::move(job));
    remote_probes_.emplace(r.id, std::move(p));
    return false;
  }
  const RemoteProbe& p = it->second;
  if (!p.done) return now >= p.deadline;  // past the deadline: compute instead of waiting
  for (int i = next; i < max_blocks; ++i) {
    const int k = i - p.first;
    if (k < 0 || k >= static_cast<int>(p.hashes.size()) || !p.present[static_cast<size_t>(k)] ||
        p.hashes[static_cast<size_t>(k)] != r.block_hashes[static_cast<size_t>(i)])
      break;
    found.push_back(Location{TierKind::kRemote, -1});
  }
  return true;
}

// ---- promotion --------------------------------------------------------------------------------

TieredKVCache::PrefixState TieredKVCache::prepare_prefix(Request& r) {
  poll();
  if (promotions_.contains(r.id)) return PrefixState::kLoading;
  const BlockPool& pool = manager_.pool();
  if (!pool.caching_enabled() || r.skip_prefix_cache || r.num_tokens() == 0) return PrefixState::kReady;
  manager_.hash_request(r);
  const int bs = manager_.block_size();
  const int max_blocks = std::min((r.num_tokens() - 1) / bs, static_cast<int>(r.block_hashes.size()));
  ComputedBlocks device_hits;
  device_hits.num_groups = 1;
  int d = 0;
  for (; d < max_blocks; ++d) {
    // As the manager's lookup: each hit also confirms it was cached after the previous hit.
    auto hit = pool.find_cached(key_of(r, d, d == 0 ? kNoLink : device_hits.blocks[0].back().value));
    if (!hit) break;
    device_hits.blocks[0].push_back(*hit);
  }
  device_hits.num_computed_tokens = d * bs;
  // Continue the prefix below the device: host first, then disk.
  std::vector<Location> found;
  for (int i = d; i < max_blocks; ++i) {
    const BlockContentKey key = key_of(r, i);
    if (host_)
      if (auto s = host_->slots().find(key)) {
        found.push_back(Location{TierKind::kHost, *s});
        continue;
      }
    if (disk_)
      if (auto s = disk_->find(key)) {
        found.push_back(Location{TierKind::kDisk, *s});
        continue;
      }
    break;
  }
  // Then the remote tier, whose answer takes a round trip: the request waits for it (others run).
  if (remote_ && d + static_cast<int>(found.size()) < max_blocks &&
      !extend_from_remote(r, d + static_cast<int>(found.size()), max_blocks, found))
    return PrefixState::kLoading;
  if (found.empty()) return PrefixState::kReady;
  // Only when the whole request would fit now: the promoted blocks are part of what it needs.
  if (manager_.get_num_blocks_to_allocate(r, r.num_tokens(), &device_hits) > manager_.num_free_blocks())
    return PrefixState::kReady;
  // Pin the sources first: the device allocation below may offload into the host tier.
  for (const Location& l : found) {
    if (l.tier == TierKind::kRemote) continue;  // no slot: the store keeps (or evicts) it
    SlotIndex& slots = l.tier == TierKind::kHost ? host_->slots() : disk_->slots();
    slots.pin(l.slot);
    TierStats& st = l.tier == TierKind::kHost ? host_->mutable_stats() : disk_->mutable_stats();
    ++st.lookups;
    ++st.hits;
  }
  const int p = static_cast<int>(found.size());
  Promotion promo;
  promo.holder = Request(RequestId{kHolderIdBase + next_holder_id_++},
                         std::vector<TokenId>(r.tokens.begin(), r.tokens.begin() + (d + p) * bs));
  promo.holder.block_hashes.assign(r.block_hashes.begin(), r.block_hashes.begin() + d + p);
  promo.holder.block_extra_digests.assign(
      r.block_extra_digests.begin(),
      r.block_extra_digests.begin() + std::min<ptrdiff_t>(d + p, std::ssize(r.block_extra_digests)));
  promo.holder.lora_id = r.lora_id;
  promo.holder.cache_salt = r.cache_salt;
  promo.holder.mm_inputs = r.mm_inputs;
  auto allocated = manager_.allocate_slots(promo.holder, p * bs, d * bs, &device_hits, 0, /*delay_cache_blocks=*/true);
  if (!allocated) {
    for (const Location& l : found)
      if (l.tier != TierKind::kRemote) (l.tier == TierKind::kHost ? host_->slots() : disk_->slots()).unpin(l.slot);
    return PrefixState::kReady;
  }
  const auto table = manager_.get_block_ids(promo.holder.id);
  bool any_disk = false;
  RemoteFetchJob remote_load;
  remote_load.kind = RemoteFetchJob::Kind::kLoad;
  remote_load.owner = r.id;
  for (int k = 0; k < p; ++k) {
    const Location& l = found[static_cast<size_t>(k)];
    const int32_t dst = table[static_cast<size_t>(d + k)].value;
    promo.source.push_back(l.tier);
    if (l.tier == TierKind::kHost) {
      pending_.host_to_device.push_back(MemoryCopy{l.slot, dst, TransferPurpose::kPromotion, r.id});
    } else if (l.tier == TierKind::kRemote) {
      remote_load.loads.push_back(RemoteLoad{StoredBlockKey::from(key_of(r, d + k)), dst});
    } else {
      any_disk = true;
      DiskRead rd;
      rd.slot = l.slot;
      rd.device_block = dst;
      rd.expected = StoredBlockKey::from(key_of(r, d + k));
      rd.purpose = TransferPurpose::kPromotion;
      rd.owner = r.id;
      pending_.disk_reads.push_back(std::move(rd));
    }
  }
  promo.first_block = d;
  promo.in_flight = p;
  promotions_.emplace(r.id, std::move(promo));
  ++promotions_started_;
  TransferHandle h = submit_pending();
  // The holder's device blocks may have been evicted by its allocation, their old bytes queued
  // in that batch for offload: the remote lane may write them only once the memory lane has
  // packed them (memcpy speed), hence the wait for the batch's memory half.
  if (!remote_load.loads.empty()) {
    if (h.valid()) h.wait_memory();
    remote_->submit(std::move(remote_load));
    return PrefixState::kLoading;
  }
  if (any_disk) return PrefixState::kLoading;
  h.wait();  // host copies are memcpy-fast and needed now
  poll();
  return promotions_.contains(r.id) ? PrefixState::kLoading : PrefixState::kReady;
}

void TieredKVCache::finish_promotion(RequestId id) {
  auto it = promotions_.find(id);
  if (it == promotions_.end()) return;
  Promotion& p = it->second;
  const auto table = manager_.get_block_ids(p.holder.id);
  auto& record = promoted_blocks_[id];
  for (size_t k = 0; k < p.source.size(); ++k) {
    if (p.source[k] == TierKind::kDevice) continue;  // failed verification: not registered
    const int i = p.first_block + static_cast<int>(k);
    // Linked to the holder's previous block (a device hit or the block promoted just before), so
    // the device pool confirms this block's prefix structurally from now on, as for any block
    // it cached itself.
    const int32_t parent = i == 0 ? kNoLink : table[static_cast<size_t>(i) - 1].value;
    manager_.pool().cache_block(table[static_cast<size_t>(i)], key_of(p.holder, i, parent));
    record.emplace_back(i, p.source[k]);
  }
  // Released tail first: the promoted blocks join the free set as its most recently used,
  // cached, so the request's admission lookup finds them.
  manager_.free(p.holder);
  promotions_.erase(it);
}

TierHitTokens TieredKVCache::take_hit_tokens(const Request& r, int hit_tokens) {
  TierHitTokens t;
  const int bs = manager_.block_size();
  if (auto it = promoted_blocks_.find(r.id); it != promoted_blocks_.end()) {
    for (const auto& [i, tier] : it->second) {
      if ((i + 1) * bs > hit_tokens) continue;
      (tier == TierKind::kHost ? t.host : tier == TierKind::kDisk ? t.disk : t.remote) += bs;
    }
    promoted_blocks_.erase(it);
  }
  remote_probes_.erase(r.id);
  t.device = hit_tokens - t.host - t.disk - t.remote;
  return t;
}

void TieredKVCache::cancel_prefix(RequestId id) {
  if (promotions_.contains(id)) {
    for (const TransferHandle& h : outstanding_) h.wait();
    poll();
    // Its remote loads still write into the holder's blocks (bounded by the store's timeouts).
    while (remote_ && promotions_.contains(id) && remote_->fetches_in_flight() > 0) {
      remote_->wait_for_fetch(std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      poll();
    }
  }
  promoted_blocks_.erase(id);
  remote_probes_.erase(id);
}

// ---- swap -------------------------------------------------------------------------------------

int TieredKVCache::swap_capacity_blocks() const {
  int n = host_ ? host_->slots().num_allocatable() : 0;
  if (disk_ && disk_->writable()) n += disk_->slots().num_allocatable();
  return n;
}

void TieredKVCache::queue_swap_copy(RequestId owner, int index, int32_t device_block, const Location& l) {
  if (l.tier == TierKind::kHost) {
    pending_.device_to_host.push_back(MemoryCopy{device_block, l.slot, TransferPurpose::kSwap, owner});
    return;
  }
  DiskWrite w;
  w.source = TierKind::kDevice;
  w.source_block = device_block;
  w.slot = l.slot;
  w.header.key = swap_key(owner, index, manager_.block_size());
  w.header.sequence = disk_->next_sequence();
  w.header.flags = kSlotFlagPrivate;
  w.purpose = TransferPurpose::kSwap;
  w.owner = owner;
  pending_.disk_writes.push_back(std::move(w));
}

bool TieredKVCache::swap_out(RequestId id, std::span<const BlockId> blocks) {
  if (swaps_.contains(id)) throw UsageError(fmt::format("swap_out: request {} is already swapped out", id.value));
  const int n = static_cast<int>(blocks.size());
  const int host_avail = host_ ? host_->slots().num_allocatable() : 0;
  const int disk_avail = disk_ && disk_->writable() ? disk_->slots().num_allocatable() : 0;
  const int host_take = std::min(n, host_avail);
  const int disk_take = n - host_take;
  if (disk_take > disk_avail) return false;
  SwapRecord rec;
  disk_reserve_ = disk_take;  // host victims are demoted only into disk slots the swap does not need
  for (int i = 0; i < host_take; ++i) {
    const int32_t slot = host_->slots().allocate([this](int32_t v) { on_host_evict(v); });
    if (slot < 0) throw InvariantError("swap_out: the host tier refused a slot it reported free");
    rec.blocks.push_back(Location{TierKind::kHost, slot});
  }
  disk_reserve_ = 0;
  for (int i = host_take; i < n; ++i) {
    TierStats& ds = disk_->mutable_stats();
    const int32_t slot = disk_->slots().allocate([&ds](int32_t) { ++ds.evictions; });
    if (slot < 0) throw InvariantError("swap_out: the disk tier refused a slot it reported free");
    rec.blocks.push_back(Location{TierKind::kDisk, slot});
  }
  const BlockPool& pool = manager_.pool();
  for (int i = 0; i < n; ++i) {
    Location& l = rec.blocks[static_cast<size_t>(i)];
    const int32_t block = blocks[static_cast<size_t>(i)].value;
    // A full block in the device prefix cache keeps its bytes after the victim frees it, until the
    // pool drops it (on_device_uncache): copy it then, if ever.
    if (config_.lazy_swap_copies && pool.block(BlockId{block}).has_hash) {
      l.deferred_block = block;
      deferred_[block].push_back(DeferredCopy{id, i});
      ++(l.tier == TierKind::kHost ? host_->mutable_stats() : disk_->mutable_stats()).swap_copies_deferred;
    } else {
      queue_swap_copy(id, i, block, l);
    }
  }
  if (host_) host_->mutable_stats().swapped_out_blocks += static_cast<uint64_t>(host_take);
  if (disk_) disk_->mutable_stats().swapped_out_blocks += static_cast<uint64_t>(disk_take);
  swaps_.emplace(id, std::move(rec));
  return true;
}

void TieredKVCache::forget_deferred(int32_t block, RequestId owner) {
  auto it = deferred_.find(block);
  std::erase_if(it->second, [&](const DeferredCopy& d) { return d.owner == owner; });
  if (it->second.empty()) deferred_.erase(it);
}

void TieredKVCache::on_device_uncache(const KVCacheBlock& b, RemovalReason why) {
  if (why == RemovalReason::kEvicted) on_device_evict(b);
  auto it = deferred_.find(b.id.value);  // lazy_swap_copies: copy now, whatever the reason
  if (it == deferred_.end()) return;
  for (const DeferredCopy& d : it->second) {
    Location& l = swaps_.at(d.owner).blocks[static_cast<size_t>(d.index)];
    queue_swap_copy(d.owner, d.index, l.deferred_block, l);
    l.deferred_block = -1;
  }
  deferred_.erase(it);
}

TieredKVCache::SwapInState TieredKVCache::start_swap_in(RequestId id, int first_block, std::span<const BlockId> dst) {
  auto it = swaps_.find(id);
  if (it == swaps_.end()) throw UsageError(fmt::format("start_swap_in: request {} is not swapped out", id.value));
  SwapRecord& rec = it->second;
  if (rec.loading) throw UsageError(fmt::format("start_swap_in: request {} is already swapping in", id.value));
  const int n = static_cast<int>(rec.blocks.size());
  if (first_block < 0 || first_block + static_cast<int>(dst.size()) > n)
    throw UsageError(fmt::format("start_swap_in: blocks [{}, {}) outside the {} swapped blocks", first_block,
                                 first_block + static_cast<int>(dst.size()), n));
  // Deferred copies (lazy_swap_copies): blocks before first_block are resumed from the device
  // cache and never copied; needed ones are copied into their slots now, ahead of the loads.
  bool copied_deferred = false;
  for (int i = 0; i < n; ++i) {
    Location& l = rec.blocks[static_cast<size_t>(i)];
    if (l.deferred_block < 0) continue;
    forget_deferred(l.deferred_block, id);
    const int k = i - first_block;
    if (k < 0 || k >= static_cast<int>(dst.size())) {
      ++(l.tier == TierKind::kHost ? host_->mutable_stats() : disk_->mutable_stats()).swap_copies_skipped;
    } else {
      queue_swap_copy(id, i, l.deferred_block, l);
      copied_deferred = true;
    }
    l.deferred_block = -1;
  }
  TransferHandle copies = submit_pending();  // the swap-out copies go first
  if (copied_deferred && copies.valid()) {
    copies.wait();  // a load must not overtake the write of its own slot
    poll();
  }
  for (int i = 0; i < n; ++i) {
    Location& l = rec.blocks[static_cast<size_t>(i)];
    const int k = i - first_block;
    if (k < 0 || k >= static_cast<int>(dst.size())) {  // not needed: release
      (l.tier == TierKind::kHost ? host_->slots() : disk_->slots()).unpin(l.slot);
    } else if (l.tier == TierKind::kHost) {
      pending_.host_to_device.push_back(
          MemoryCopy{l.slot, dst[static_cast<size_t>(k)].value, TransferPurpose::kSwap, id});
      ++rec.in_flight;
    } else {
      DiskRead rd;
      rd.slot = l.slot;
      rd.device_block = dst[static_cast<size_t>(k)].value;
      rd.expected = swap_key(id, i, manager_.block_size());
      rd.expected_flags = kSlotFlagPrivate;
      rd.purpose = TransferPurpose::kSwap;
      rd.owner = id;
      pending_.disk_reads.push_back(std::move(rd));
      ++rec.in_flight;
    }
    l.slot = -1;  // the pin now belongs to the load (or is released)
  }
  rec.loading = true;
  TransferHandle h = submit_pending();
  if (h.valid() && !h.batch().has_disk_io()) {
    h.wait();  // host copies: needed this step
    poll();
  }
  return poll_swap_in(id);
}

TieredKVCache::SwapInState TieredKVCache::poll_swap_in(RequestId id) {
  poll();
  auto it = swaps_.find(id);
  if (it == swaps_.end()) throw UsageError(fmt::format("poll_swap_in: request {} is not swapped out", id.value));
  if (!it->second.loading || it->second.in_flight > 0) return SwapInState::kLoading;
  const SwapInState s = it->second.failed ? SwapInState::kFailed : SwapInState::kDone;
  swaps_.erase(it);
  return s;
}

void TieredKVCache::drop_swap(RequestId id) {
  auto it = swaps_.find(id);
  if (it == swaps_.end()) return;
  submit_pending();
  if (it->second.in_flight > 0) {
    for (const TransferHandle& h : outstanding_) h.wait();
    poll();
    it = swaps_.find(id);
  }
  for (const Location& l : it->second.blocks) {
    if (l.deferred_block >= 0) {
      forget_deferred(l.deferred_block, id);
      ++(l.tier == TierKind::kHost ? host_->mutable_stats() : disk_->mutable_stats()).swap_copies_skipped;
    }
    if (l.slot >= 0) (l.tier == TierKind::kHost ? host_->slots() : disk_->slots()).unpin(l.slot);
  }
  swaps_.erase(it);
}

// ---- write-through, flush, shutdown --------------------------------------------------------------

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

// ---- introspection ------------------------------------------------------------------------------

std::string TieredKVCache::describe() const {
  std::string s;
  if (host_)
    s += fmt::format("host tier: {} blocks ({:.2f} MiB)", host_->capacity_blocks(),
                     static_cast<double>(host_->arena().bytes()) / (1 << 20));
  else
    s += "host tier: none";
  if (disk_) {
    s += fmt::format("; disk tier: {} ({} slots of {} bytes, {} blocks found, {})", disk_->path(),
                     disk_->capacity_blocks(), disk_->slot_bytes(), disk_->stats().rebuilt_blocks,
                     disk_->available() ? disk_->stats().io_backend : "degraded: " + disk_->stats().degraded_reason);
  }
  if (remote_) s += "; remote tier: " + remote_->describe();
  return s;
}

void TieredKVCache::collect_pins(const TransferBatch& b, std::vector<int32_t>& host, std::vector<int32_t>& disk) const {
  for (const DiskWrite& w : b.disk_writes)
    if (w.purpose != TransferPurpose::kSwap) ++disk[static_cast<size_t>(w.slot)];
  for (const MemoryCopy& c : b.device_to_host)
    if (c.purpose != TransferPurpose::kSwap) ++host[static_cast<size_t>(c.dst)];
  for (const MemoryCopy& c : b.host_to_device) ++host[static_cast<size_t>(c.src)];
  for (const DiskRead& r : b.disk_reads) ++disk[static_cast<size_t>(r.slot)];
}

void TieredKVCache::check_invariants() const {
  if (host_) host_->check_invariants();
  if (disk_) disk_->check_invariants();
  std::vector<int32_t> host(static_cast<size_t>(host_ ? host_->capacity_blocks() : 0), 0);
  std::vector<int32_t> disk(static_cast<size_t>(disk_ ? disk_->capacity_blocks() : 0), 0);
  collect_pins(pending_, host, disk);
  for (const TransferHandle& h : outstanding_) collect_pins(h.batch(), host, disk);
  for (const auto& [id, rec] : swaps_)
    for (const Location& l : rec.blocks)
      if (l.slot >= 0) ++(l.tier == TierKind::kHost ? host : disk)[static_cast<size_t>(l.slot)];
  auto compare = [](const SlotIndex& slots, const std::vector<int32_t>& owners, const char* tier) {
    for (int32_t s = 0; s < slots.num_slots(); ++s)
      if (slots.ref(s) != owners[static_cast<size_t>(s)])
        throw InvariantError(fmt::format("{} tier slot {} is pinned {} times but has {} owners (transfers in flight "
                                         "and swapped-out blocks)",
                                         tier, s, slots.ref(s), owners[static_cast<size_t>(s)]));
  };
  if (host_) compare(host_->slots(), host, "host");
  if (disk_ && disk_->capacity_blocks() > 0) compare(disk_->slots(), disk, "disk");
  for (const auto& [block, copies] : deferred_) {
    // A deferred swap copy reads a block the device cache still holds, recorded in its swap.
    if (copies.empty()) throw InvariantError(fmt::format("deferred swap copies of device block {}: none", block));
    for (const DeferredCopy& d : copies) {
      auto it = swaps_.find(d.owner);
      if (it == swaps_.end() || d.index < 0 || d.index >= static_cast<int>(it->second.blocks.size()) ||
          it->second.blocks[static_cast<size_t>(d.index)].deferred_block != block)
        throw InvariantError(
            fmt::format("deferred swap copy of device block {} has no matching swapped block", block));
    }
    if (!manager_.pool().block(BlockId{block}).has_hash)
      throw InvariantError(fmt::format("deferred swap copy of device block {}: the device cache dropped it uncopied",
                                       block));
  }
  for (const auto& [id, p] : promotions_)
    if (!manager_.has_request(p.holder.id))
      throw InvariantError(fmt::format("promotion for request {} lost its holder", id.value));
  if (remote_) {
    remote_->check_invariants();
    for (const auto& [id, probe] : remote_probes_)
      if (probe.done && probe.present.size() != probe.hashes.size())
        throw InvariantError(fmt::format("remote probe of request {}: {} answers for {} blocks", id.value,
                                         probe.present.size(), probe.hashes.size()));
  }
}

void TieredKVCache::enable_events() {
  if (host_) host_->slots().enable_events(Medium::kHost);
  if (disk_) disk_->slots().enable_events(Medium::kDisk);
}

std::vector<KVEvent> TieredKVCache::take_events() {
  std::vector<KVEvent> out;
  if (host_) out = host_->slots().take_events();
  if (disk_) {
    std::vector<KVEvent> disk = disk_->slots().take_events();
    out.insert(out.end(), disk.begin(), disk.end());
  }
  return out;
}

std::vector<KVEvent> TieredKVCache::cached_blocks() const {
  std::vector<KVEvent> out;
  auto add = [&out](const SlotIndex& slots, Medium medium) {
    slots.for_each_cached([&](int32_t slot) {
      KVEvent e;
      e.kind = KVEventKind::kBlockStored;
      e.hash = slots.hash(slot);
      e.token_count = slots.block_size();
      e.block = BlockId{slot};
      e.group = slots.key(slot).group;
      e.medium = medium;
      out.push_back(e);
    });
  };
  if (host_) add(host_->slots(), Medium::kHost);
  if (disk_) add(disk_->slots(), Medium::kDisk);
  return out;
}

}  // namespace pagedkv
