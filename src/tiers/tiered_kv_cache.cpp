#include "pagedkv/tiers/tiered_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "pagedkv/core/error.h"

namespace pagedkv {

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
    if (config_.remote_key_prefix.empty() || config_.remote_key_prefix.find_first_of(" \t\r\n") != std::string::npos)
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
  swaps_.emplace(host_.get(), disk_.get(), manager_.block_size(), config_.lazy_swap_copies,
                 [this](int32_t slot) { on_host_evict(slot); });
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
      swaps_->write_done(w.owner, w.ok);
      continue;
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
      swaps_->host_load_done(c.owner);
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
      swaps_->disk_load_done(r.owner, ok);
    } else {
      promotion_result(r.owner, r.device_block, ok);
    }
  }
  for (RequestId id : promotions_touched) finish_promotion(id);
}

// ---- swap: the store keeps the swapped blocks; the batches it queues are submitted here ----------

int TieredKVCache::swap_capacity_blocks() const { return swaps_->capacity_blocks(); }

bool TieredKVCache::swap_out(RequestId id, std::span<const BlockId> blocks) {
  return swaps_->swap_out(id, blocks, manager_.pool(), pending_);
}

TieredKVCache::SwapInState TieredKVCache::start_swap_in(RequestId id, int first_block, std::span<const BlockId> dst) {
  const bool copied_deferred = swaps_->begin_swap_in(id, first_block, static_cast<int>(dst.size()), pending_);
  TransferHandle copies = submit_pending();  // the swap-out copies go first
  if (copied_deferred && copies.valid()) {
    copies.wait();  // a load must not overtake the write of its own slot
    poll();
  }
  swaps_->queue_swap_in_loads(id, first_block, dst, pending_);
  TransferHandle h = submit_pending();
  if (h.valid() && !h.batch().has_disk_io()) {
    h.wait();  // host copies: needed this step
    poll();
  }
  return poll_swap_in(id);
}

TieredKVCache::SwapInState TieredKVCache::poll_swap_in(RequestId id) {
  poll();
  return swaps_->finish_swap_in(id);
}

void TieredKVCache::drop_swap(RequestId id) {
  if (!swaps_->contains(id)) return;
  submit_pending();
  if (swaps_->loads_in_flight(id)) {
    for (const TransferHandle& h : outstanding_) h.wait();
    poll();
  }
  swaps_->drop(id);
}

// ---- introspection ------------------------------------------------------------------------------

std::string TieredKVCache::describe() const {
  std::string s;
  if (host_)
    s += fmt::format("host tier: {} blocks ({:.2f} MiB)", host_->capacity_blocks(),
                     static_cast<double>(host_->arena().bytes()) / (1 << 20));
  else s += "host tier: none";
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
  swaps_->count_pins(host, disk);
  auto compare = [](const SlotIndex& slots, const std::vector<int32_t>& owners, const char* tier) {
    for (int32_t s = 0; s < slots.num_slots(); ++s)
      if (slots.ref(s) != owners[static_cast<size_t>(s)])
        throw InvariantError(
            fmt::format("{} tier slot {} is pinned {} times but has {} owners (transfers in flight "
                        "and swapped-out blocks)",
                        tier, s, slots.ref(s), owners[static_cast<size_t>(s)]));
  };
  if (host_) compare(host_->slots(), host, "host");
  if (disk_ && disk_->capacity_blocks() > 0) compare(disk_->slots(), disk, "disk");
  swaps_->check_invariants(manager_.pool());
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
