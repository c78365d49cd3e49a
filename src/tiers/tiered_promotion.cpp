// Promotion: a waiting request's prefix continued below the device, its blocks loaded into
// device blocks and registered in the device prefix cache before the request is admitted.
#include "pagedkv/tiers/tiered_kv_cache.h"

#include <algorithm>
#include <vector>

namespace pagedkv {
namespace {

// Private manager requests that hold promoted blocks while their bytes are in flight. Engine
// request ids count up from 1 and parallel-sample children from 2^62: these never collide.
constexpr uint64_t kHolderIdBase = 1ull << 63;
}  // namespace

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
    auto hit = pool.find_cached(manager_.content_key(r, d, d == 0 ? kNoLink : device_hits.blocks[0].back().value));
    if (!hit) break;
    device_hits.blocks[0].push_back(*hit);
  }
  device_hits.num_computed_tokens = d * bs;
  // Continue the prefix below the device: host first, then disk.
  std::vector<Location> found;
  for (int i = d; i < max_blocks; ++i) {
    const BlockContentKey key = manager_.content_key(r, i, kUnknownParent);
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
      remote_load.loads.push_back(
          RemoteLoad{StoredBlockKey::from(manager_.content_key(r, d + k, kUnknownParent)), dst});
    } else {
      any_disk = true;
      DiskRead rd;
      rd.slot = l.slot;
      rd.device_block = dst;
      rd.expected = StoredBlockKey::from(manager_.content_key(r, d + k, kUnknownParent));
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
    manager_.pool().cache_block(table[static_cast<size_t>(i)], manager_.content_key(p.holder, i, parent));
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

}  // namespace pagedkv
