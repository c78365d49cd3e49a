#include "pagedkv/tiers/remote_tier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "pagedkv/core/error.h"
#include "pagedkv/tiers/block_copy.h"
#include "pagedkv/tiers/remote_value_format.h"

namespace pagedkv {
namespace {

// Known-stored hashes kept on the owner side to skip packing duplicates; past this many the set
// starts over (a stale entry costs a skipped store, which the store's EXISTS round would catch).
constexpr size_t kMaxKnownStored = size_t{1} << 18;

}  // namespace

RemoteTier::RemoteTier(RemoteTierOptions options, KVArena& device)
    : options_(std::move(options)),
      device_(device),
      value_bytes_(remote_value_bytes(device.spec().block_size, block_payload_bytes(device))),
      breaker_(options_.backoff_initial, options_.backoff_max) {
  if (!options_.connect) throw ConfigError("the remote KV tier needs a store to connect to");
  // As many as the queue may hold: a burst up to the limit finds its buffers allocated and mapped.
  max_spare_buffers_ = options_.max_queued_store_bytes / value_bytes_;
  fetch_thread_ = std::thread([this] { fetch_lane(); });
  store_thread_ = std::thread([this] { store_lane(); });
}

RemoteTier::~RemoteTier() {
  stop_.store(true);
  { std::lock_guard lock(fetch_m_); }
  fetch_cv_.notify_all();
  { std::lock_guard lock(store_m_); }
  store_cv_.notify_all();
  fetch_thread_.join();
  store_thread_.join();
}

std::string RemoteTier::key_of(const BlockHash& hash) const {
  return remote_block_key(options_.key_prefix, options_.fingerprint, hash);
}

std::string RemoteTier::describe() const {
  return fmt::format("{} (keys {}:{}:*, values of {} bytes){}", options_.description, options_.key_prefix,
                     options_.fingerprint.hex(), value_bytes_, degraded() ? ", degraded: " + degraded_reason() : "");
}

// ---- owner side -------------------------------------------------------------------------------

void RemoteTier::submit(RemoteFetchJob job) {
  if (job.kind == RemoteFetchJob::Kind::kProbe) job.present.assign(job.probe.size(), 0);
  ++fetches_in_flight_;
  {
    std::lock_guard lock(fetch_m_);
    fetch_queue_.push_back(std::move(job));
  }
  fetch_cv_.notify_one();
}

std::vector<RemoteFetchJob> RemoteTier::take_finished() {
  std::vector<RemoteFetchJob> out;
  {
    std::lock_guard lock(fetch_m_);
    out.swap(finished_);
  }
  fetches_in_flight_ -= static_cast<int>(out.size());
  std::vector<BlockHash> forgotten;
  {
    std::lock_guard lock(store_m_);
    forgotten.swap(forgotten_);
  }
  for (const BlockHash& h : forgotten) known_stored_.erase(h);
  for (const RemoteFetchJob& j : out)
    if (j.kind == RemoteFetchJob::Kind::kProbe)
      for (size_t i = 0; i < j.probe.size(); ++i)
        if (j.present[i]) note_present(j.probe[i]);
  return out;
}

bool RemoteTier::wait_for_fetch(Clock::time_point deadline) {
  std::unique_lock lock(fetch_m_);
  return finished_cv_.wait_until(lock, deadline, [&] { return !finished_.empty(); });
}

void RemoteTier::note_present(const BlockHash& hash) {
  if (known_stored_.size() >= kMaxKnownStored) known_stored_.clear();
  known_stored_.insert(hash);
}

bool RemoteTier::should_store(const BlockHash& hash) {
  if (known_stored_.contains(hash)) {
    ++counters_.duplicates;
    return false;
  }
  const auto now = Clock::now();
  if (!breaker_.allow(now) || writes_paused(now)) {
    ++counters_.dropped;
    return false;
  }
  note_present(hash);
  return true;
}

void RemoteTier::flush(std::chrono::milliseconds max_wait) {
  std::unique_lock lock(store_m_);
  store_idle_cv_.wait_for(lock, max_wait, [&] { return store_queue_.empty() && !store_busy_; });
}

// ---- packing (memory lane) ----------------------------------------------------------------------

RemoteTier::ValueBuffer RemoteTier::take_buffer() {
  {
    std::lock_guard lock(store_m_);
    if (!spare_buffers_.empty()) {
      ValueBuffer b = std::move(spare_buffers_.back());
      spare_buffers_.pop_back();
      return b;
    }
  }
  // Not value-initialised: the pack overwrites every byte (a zero-fill was a third pass).
  return std::make_unique_for_overwrite<std::byte[]>(value_bytes_);
}

void RemoteTier::give_buffers(std::vector<PendingStore>& batch) {
  std::lock_guard lock(store_m_);
  for (PendingStore& p : batch)
    if (spare_buffers_.size() < max_spare_buffers_) spare_buffers_.push_back(std::move(p.value));
  batch.clear();
}

void RemoteTier::store(const KVArena& source, int32_t block, const StoredBlockKey& key) {
  {
    std::lock_guard lock(store_m_);
    if (queued_bytes_ + value_bytes_ > options_.max_queued_store_bytes) {
      ++counters_.dropped;  // the link is saturated: drop rather than wait
      forgotten_.push_back(key.hash);
      return;
    }
  }
  ValueBuffer value = take_buffer();
  pack_remote_value(source, block, key, options_.fingerprint, std::span(value.get(), value_bytes_));
  {
    std::lock_guard lock(store_m_);
    queued_bytes_ += value_bytes_;
    store_queue_.push_back(PendingStore{key.hash, std::move(value)});
  }
  store_cv_.notify_one();
}

// ---- link state -------------------------------------------------------------------------------

void RemoteTier::link_failed(RemoteStore& conn) {
  ++counters_.io_errors;
  const std::string why = conn.last_error();
  if (breaker_.on_failure(why) && options_.log_degraded)
    fmt::print(stderr, "pagedkv: remote KV tier {} unavailable ({}); serving without it, retrying with back-off\n",
               options_.description, why);
}

void RemoteTier::link_ok() {
  if (breaker_.on_success() && options_.log_degraded)
    fmt::print(stderr, "pagedkv: remote KV tier {} is back\n", options_.description);
}

bool RemoteTier::writes_paused(Clock::time_point now) const {
  std::lock_guard lock(store_m_);
  return now < writes_paused_until_;
}

bool RemoteTier::degraded() const { return breaker_.open() || writes_paused(Clock::now()); }

std::string RemoteTier::degraded_reason() const {
  if (breaker_.open()) return "unavailable: " + breaker_.reason();
  if (writes_paused(Clock::now())) return "full: the store refuses writes for memory";
  return "";
}

// ---- fetch lane ---------------------------------------------------------------------------------

void RemoteTier::fetch_lane() {
  std::unique_ptr<RemoteStore> conn = options_.connect();
  for (;;) {
    RemoteFetchJob job;
    {
      std::unique_lock lock(fetch_m_);
      fetch_cv_.wait(lock, [&] { return stop_.load() || !fetch_queue_.empty(); });
      if (fetch_queue_.empty()) return;
      job = std::move(fetch_queue_.front());
      fetch_queue_.pop_front();
    }
    run_fetch(*conn, job);
    {
      std::lock_guard lock(fetch_m_);
      finished_.push_back(std::move(job));
    }
    finished_cv_.notify_all();
  }
}

void RemoteTier::run_fetch(RemoteStore& conn, RemoteFetchJob& job) {
  const bool may_call = !stop_.load() && breaker_.allow();
  if (job.kind == RemoteFetchJob::Kind::kProbe) {
    counters_.lookups += job.probe.size();
    if (!may_call) return;  // all absent
    std::vector<std::string> keys;
    keys.reserve(job.probe.size());
    for (const BlockHash& h : job.probe) keys.push_back(key_of(h));
    ++counters_.probes;
    if (conn.exists(keys, job.present) != RemoteStatus::kOk) {
      std::fill(job.present.begin(), job.present.end(), uint8_t{0});
      link_failed(conn);
      return;
    }
    link_ok();
    counters_.hits += static_cast<uint64_t>(std::count(job.present.begin(), job.present.end(), uint8_t{1}));
    return;
  }
  auto fail_rest = [&](RemoteLoadResult why) {
    for (RemoteLoad& l : job.loads)
      if (l.result == RemoteLoadResult::kPending) l.result = why;
  };
  if (!may_call) {
    counters_.unavailable_loads += job.loads.size();
    fail_rest(RemoteLoadResult::kUnavailable);
    return;
  }
  std::vector<std::string> keys;
  keys.reserve(job.loads.size());
  for (const RemoteLoad& l : job.loads) keys.push_back(key_of(l.expected.hash));
  const RemoteStatus st = conn.get(keys, [&](size_t i, std::span<const std::byte> value) {
    RemoteLoad& l = job.loads[i];
    // Verified as it is scattered: a block whose payload fails its checksum holds garbage, but
    // its load fails and the owner never registers it (TieredKVCache::finish_promotion).
    const RemoteValueStatus v = load_remote_value(value, options_.fingerprint, l.expected, device_, l.device_block);
    if (v == RemoteValueStatus::kOk) {
      l.result = RemoteLoadResult::kOk;
      ++counters_.loaded_blocks;
      counters_.loaded_bytes += value.size();
    } else if (v == RemoteValueStatus::kFingerprintMismatch) {
      l.result = RemoteLoadResult::kFingerprintMismatch;
      ++counters_.fingerprint_mismatches;
    } else {
      l.result = RemoteLoadResult::kCorrupt;
      ++counters_.corrupt;
    }
  });
  if (st == RemoteStatus::kOk) {
    link_ok();
    for (RemoteLoad& l : job.loads)
      if (l.result == RemoteLoadResult::kPending) ++counters_.vanished;  // evicted since the probe
    fail_rest(RemoteLoadResult::kMissing);
    return;
  }
  if (st == RemoteStatus::kUnavailable) link_failed(conn);
  else ++counters_.io_errors;
  for (RemoteLoad& l : job.loads)
    if (l.result == RemoteLoadResult::kPending) ++counters_.unavailable_loads;
  fail_rest(RemoteLoadResult::kUnavailable);
}

// ---- store lane ---------------------------------------------------------------------------------

void RemoteTier::store_lane() {
  std::unique_ptr<RemoteStore> conn = options_.connect();
  std::vector<PendingStore> batch;
  for (;;) {
    const size_t max_batch = std::max(options_.max_store_batch, conn->preferred_batch());
    {
      std::unique_lock lock(store_m_);
      store_busy_ = false;
      if (store_queue_.empty()) store_idle_cv_.notify_all();
      store_cv_.wait(lock, [&] { return stop_.load() || !store_queue_.empty(); });
      if (stop_.load()) {
        counters_.dropped += store_queue_.size();
        store_queue_.clear();
        queued_bytes_ = 0;
        store_idle_cv_.notify_all();
        return;
      }
      while (!store_queue_.empty() && batch.size() < max_batch) {
        queued_bytes_ -= value_bytes_;
        batch.push_back(std::move(store_queue_.front()));
        store_queue_.pop_front();
      }
      store_busy_ = true;
    }
    run_stores(*conn, batch);
    give_buffers(batch);
  }
}

void RemoteTier::run_stores(RemoteStore& conn, std::vector<PendingStore>& batch) {
  auto drop_all = [&] {
    counters_.dropped += batch.size();
    std::lock_guard lock(store_m_);
    for (const PendingStore& p : batch) forgotten_.push_back(p.hash);
  };
  const auto now = Clock::now();
  if (!breaker_.allow(now) || writes_paused(now)) return drop_all();
  std::vector<std::string> keys;
  keys.reserve(batch.size());
  for (const PendingStore& p : batch) keys.push_back(key_of(p.hash));
  // Another process may have stored the same blocks: one cheap round first, values only for the
  // absent ones.
  std::vector<uint8_t> present;
  if (conn.exists(keys, present) != RemoteStatus::kOk) {
    link_failed(conn);
    return drop_all();
  }
  std::vector<std::string> send_keys;
  std::vector<std::span<const std::byte>> send_values;
  std::vector<BlockHash> send_hashes;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (present[i]) {
      ++counters_.duplicates;
      continue;
    }
    send_keys.push_back(std::move(keys[i]));
    send_values.emplace_back(batch[i].value.get(), value_bytes_);
    send_hashes.push_back(batch[i].hash);
  }
  if (send_keys.empty()) return link_ok();
  std::vector<uint8_t> stored;
  const RemoteStatus st = conn.set(send_keys, send_values, stored);
  if (st == RemoteStatus::kUnavailable) {
    link_failed(conn);
    return drop_all();
  }
  link_ok();
  std::vector<BlockHash> failed;
  for (size_t i = 0; i < send_keys.size(); ++i) {
    if (stored[i]) {
      ++counters_.stored_blocks;
      counters_.stored_bytes += send_values[i].size();
    } else {
      ++counters_.dropped;
      failed.push_back(send_hashes[i]);
    }
  }
  std::lock_guard lock(store_m_);
  forgotten_.insert(forgotten_.end(), failed.begin(), failed.end());
  if (st == RemoteStatus::kFull) {
    counters_.full_refusals += failed.size();
    // Pause writes (reads go on), backing off while the store stays full.
    full_backoff_ =
        full_backoff_.count() == 0 ? options_.backoff_initial : std::min(options_.backoff_max, full_backoff_ * 2);
    writes_paused_until_ = Clock::now() + full_backoff_;
    if (!full_logged_ && options_.log_degraded)
      fmt::print(stderr, "pagedkv: remote KV tier {} refuses writes for memory ({}); stores paused with back-off\n",
                 options_.description, conn.last_error());
    full_logged_ = true;
  } else if (st == RemoteStatus::kOk) {
    full_backoff_ = std::chrono::milliseconds{0};
    full_logged_ = false;
  } else {
    ++counters_.io_errors;
  }
}

// ---- introspection --------------------------------------------------------------------------------

RemoteTierStats RemoteTier::stats() const {
  RemoteTierStats s;
  const Counters& c = counters_;
  s.lookups = c.lookups;
  s.hits = c.hits;
  s.probes = c.probes;
  s.loaded_blocks = c.loaded_blocks;
  s.loaded_bytes = c.loaded_bytes;
  s.stored_blocks = c.stored_blocks;
  s.stored_bytes = c.stored_bytes;
  s.duplicates = c.duplicates;
  s.dropped = c.dropped;
  s.corrupt_blocks = c.corrupt;
  s.fingerprint_mismatches = c.fingerprint_mismatches;
  s.io_errors = c.io_errors;
  s.vanished = c.vanished;
  s.unavailable_loads = c.unavailable_loads;
  s.store_full_refusals = c.full_refusals;
  s.breaker_trips = breaker_.trips();
  s.degraded = degraded();
  s.degraded_reason = degraded_reason();
  s.io_backend = options_.description;
  return s;
}

void RemoteTier::check_invariants() const {
  size_t bytes = 0;
  {
    std::lock_guard lock(store_m_);
    bytes = store_queue_.size() * value_bytes_;
    if (bytes != queued_bytes_)
      throw InvariantError(
          fmt::format("remote tier: {} bytes queued for the store lane, accounted {}", bytes, queued_bytes_));
    if (queued_bytes_ > options_.max_queued_store_bytes)
      throw InvariantError(fmt::format("remote tier: {} bytes queued, more than the limit {}", queued_bytes_,
                                       options_.max_queued_store_bytes));
  }
  std::lock_guard lock(fetch_m_);
  const int held = static_cast<int>(fetch_queue_.size() + finished_.size());
  if (fetches_in_flight_ < held)
    throw InvariantError(fmt::format("remote tier: {} fetch jobs submitted and not taken, but {} queued or finished",
                                     fetches_in_flight_, held));
}

}  // namespace pagedkv
