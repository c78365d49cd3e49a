#include "pagedkv/router/backend_pool.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>

#include "pagedkv/api/kv_events_wire.h"
#include "pagedkv/core/error.h"

namespace pagedkv::router {
namespace {

using Clock = std::chrono::steady_clock;

httplib::Headers auth_headers(const std::string& api_key) {
  if (api_key.empty()) return {};
  return {{"Authorization", "Bearer " + api_key}};
}

}  // namespace

BackendAddress BackendAddress::parse(std::string_view url) {
  std::string u(url);
  while (!u.empty() && u.back() == '/') u.pop_back();
  constexpr std::string_view kScheme = "http://";
  if (u.rfind(kScheme, 0) != 0)
    throw ConfigError(fmt::format("backend '{}': expected http://host:port (https is not supported)", url));
  const std::string rest = u.substr(kScheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || rest.find('/') != std::string::npos)
    throw ConfigError(fmt::format("backend '{}': expected http://host:port", url));
  BackendAddress a;
  a.url = u;
  a.host = rest.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) || std::stoi(port) < 1 ||
      std::stoi(port) > 65535)
    throw ConfigError(fmt::format("backend '{}': the port must be in [1, 65535]", url));
  a.port = std::stoi(port);
  return a;
}

BackendPool::BackendPool(std::vector<BackendAddress> backends, BackendPoolOptions options)
    : options_(std::move(options)), index_(0) {
  backends_.reserve(kMaxBackends);  // slots never move (address() hands out references)
  for (const BackendAddress& a : backends) {
    if (add(a) == Added::kPresent) continue;
    backends_.back()->pinned = true;
  }
}

BackendPool::~BackendPool() { stop(); }

BackendPool::Backend& BackendPool::at(int backend) {
  if (backend < 0 || static_cast<size_t>(backend) >= backends_.size())
    throw UsageError(fmt::format("BackendPool: backend {} out of range [0, {})", backend, backends_.size()));
  return *backends_[static_cast<size_t>(backend)];
}

const BackendPool::Backend& BackendPool::at(int backend) const { return const_cast<BackendPool*>(this)->at(backend); }

int BackendPool::size() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(backends_.size());
}

const BackendAddress& BackendPool::address(int backend) const {
  std::lock_guard lock(mutex_);
  return at(backend).state.address;
}

int BackendPool::find(const std::string& url) const {
  for (size_t i = 0; i < backends_.size(); ++i)
    if (backends_[i]->state.address.url == url) return static_cast<int>(i);
  return -1;
}

BackendPool::Added BackendPool::add(const BackendAddress& address) {
  std::thread retired;  // a revived slot's old monitor, joined outside the lock
  Added result = Added::kAdded;
  {
    std::lock_guard lock(mutex_);
    int i = find(address.url);
    if (i >= 0 && !at(i).state.removed) return Added::kPresent;
    if (i >= 0) {
      Backend& b = at(i);
      b.state.removed = false;
      b.state.last_error.clear();
      b.checked = false;
      retired = std::move(b.monitor);  // stopped already: remove() ended its generation
      result = Added::kRestored;
    } else {
      if (backends_.size() >= static_cast<size_t>(kMaxBackends))
        throw ConfigError(fmt::format("the router holds at most {} backend addresses", kMaxBackends));
      auto b = std::make_unique<Backend>();
      b->state.address = address;
      backends_.push_back(std::move(b));
      index_.add_backend();
      i = static_cast<int>(backends_.size()) - 1;
    }
    if (started_) start_monitor(i);
  }
  if (retired.joinable()) retired.join();
  return result;
}

bool BackendPool::remove(const std::string& url) {
  std::string wanted = url;
  while (!wanted.empty() && wanted.back() == '/') wanted.pop_back();
  {
    std::lock_guard lock(mutex_);
    const int i = find(wanted);
    if (i < 0 || at(i).state.removed) return false;
    Backend& b = at(i);
    take_down(i, "removed from the pool");
    b.state.removed = true;
    b.state.reachable = false;
    b.checked = true;
    ++b.generation;  // its monitor stops at its next look (joined at a revival or at stop())
  }
  sleep_.notify_all();
  return true;
}

std::pair<int, int> BackendPool::sync(const std::vector<BackendAddress>& addresses) {
  int added = 0, removed = 0;
  for (const BackendAddress& a : addresses) added += add(a) != Added::kPresent;
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mutex_);
    for (const std::unique_ptr<Backend>& b : backends_)
      if (!b->pinned && !b->state.removed &&
          std::none_of(addresses.begin(), addresses.end(),
                       [&](const BackendAddress& a) { return a.url == b->state.address.url; }))
        gone.push_back(b->state.address.url);
  }
  for (const std::string& url : gone) removed += remove(url);
  return {added, removed};
}

void BackendPool::pin(int backend) {
  std::lock_guard lock(mutex_);
  at(backend).pinned = true;
}

void BackendPool::start_monitor(int i) {
  Backend& b = at(i);
  const uint64_t generation = b.generation;
  b.monitor = std::thread([this, i, generation] { monitor(i, generation); });
}

void BackendPool::start() {
  std::lock_guard lock(mutex_);
  if (started_) return;
  started_ = true;
  for (size_t i = 0; i < backends_.size(); ++i)
    if (!backends_[i]->state.removed) start_monitor(static_cast<int>(i));
}

void BackendPool::stop() {
  {
    std::lock_guard lock(sleep_mutex_);
    stopping_ = true;
  }
  sleep_.notify_all();
  std::vector<std::thread> monitors;
  {
    std::lock_guard lock(mutex_);
    for (const std::unique_ptr<Backend>& b : backends_)
      if (b->monitor.joinable()) monitors.push_back(std::move(b->monitor));
  }
  for (std::thread& t : monitors) t.join();
}

bool BackendPool::wait_until_checked(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (std::all_of(backends_.begin(), backends_.end(), [](const std::unique_ptr<Backend>& b) { return b->checked; }))
        return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool BackendPool::current(int backend, uint64_t generation) const {
  const Backend& b = at(backend);
  return b.generation == generation && !b.state.removed;
}

void BackendPool::monitor(int i, uint64_t generation) {
  // One client, kept across polls: its connection is reused (httplib reconnects after an error).
  const BackendAddress& a = address(i);
  httplib::Client client(a.host, a.port);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(options_.timeout);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_keep_alive(true);
  auto next_health = Clock::now();
  while (!stopping_) {
    if (Clock::now() >= next_health) {
      check_health(i, generation, client);
      next_health = Clock::now() + options_.health_interval;
    }
    bool reachable;
    {
      std::lock_guard lock(mutex_);
      if (!current(i, generation)) return;
      reachable = at(i).state.reachable;
    }
    if (reachable) read_events(i, generation, client);
    std::unique_lock lock(sleep_mutex_);
    sleep_.wait_for(lock, options_.events_interval, [this] { return stopping_.load(); });
  }
}

void BackendPool::take_down(int i, const std::string& why) {
  Backend& b = at(i);
  if (b.state.healthy) ++b.state.went_down;
  b.state.healthy = false;
  b.state.last_error = why;
  b.state.epoch = 0;  // whatever it held is gone or unknown: start again from a snapshot
  b.state.last_seq = 0;
  b.state.reported.reset();
  index_.clear(i);
}

void BackendPool::check_health(int i, uint64_t generation, httplib::Client& client) {
  httplib::Result r = client.Get("/health", auth_headers(options_.api_key));
  std::lock_guard lock(mutex_);
  if (!current(i, generation)) return;  // removed meanwhile: its state stays as remove() left it
  Backend& b = at(i);
  b.checked = true;
  if (!r) {
    b.state.reachable = false;
    take_down(i, fmt::format("GET /health: {}", httplib::to_string(r.error())));
    return;
  }
  b.state.reachable = true;
  if (r->status == 200) {
    b.state.healthy = true;
  } else {
    // Draining (503) or refusing us: out of the rotation, but its blocks are still there.
    if (b.state.healthy) ++b.state.went_down;
    b.state.healthy = false;
    b.state.last_error = fmt::format("GET /health: HTTP {}", r->status);
  }
}

void BackendPool::read_events(int i, uint64_t generation, httplib::Client& client) {
  for (int pages = 0; pages < 100 && !stopping_; ++pages) {
    uint64_t epoch, since;
    int64_t finished_blocks;
    int finished;
    {
      std::lock_guard lock(mutex_);
      if (!current(i, generation)) return;
      const BackendState& s = at(i).state;
      epoch = s.epoch;
      since = s.last_seq;
      finished_blocks = s.finished_blocks_total;
      finished = s.finished_total;
    }
    const std::string path =
        fmt::format("/kv_events?epoch={:x}&since={}&max={}", epoch, since, options_.max_events_per_poll);
    httplib::Result r = client.Get(path, auth_headers(options_.api_key));
    api::KVEventsWirePage wire;
    std::string error;
    if (!r) error = fmt::format("GET /kv_events: {}", httplib::to_string(r.error()));
    else if (r->status != 200) error = fmt::format("GET /kv_events: HTTP {}", r->status);
    else {
      try {
        wire = api::parse_kv_events_page(r->body);
        // Events continue exactly where this reader stopped (a gap would be answered with a snapshot).
        if (!wire.page.snapshot && !wire.page.events.empty() &&
            (wire.page.epoch != epoch || wire.page.events.front().seq != since + 1))
          throw api::WireError(
              fmt::format("events start at {} after {} of epoch {:x}", wire.page.events.front().seq, since, epoch));
      } catch (const api::WireError& e) {
        error = fmt::format("GET /kv_events: malformed page: {}", e.what());
      }
    }
    const api::KVEventsPage& page = wire.page;
    std::lock_guard lock(mutex_);
    if (!current(i, generation)) return;
    Backend& b = at(i);
    if (!error.empty()) {
      ++b.state.poll_errors;
      b.state.last_error = error;
      b.state.epoch = 0;  // resynchronise from a snapshot
      return;
    }
    if (b.state.epoch != epoch || b.state.last_seq != since) return;  // taken down meanwhile
    if (wire.load) {
      b.state.reported = wire.load;
      b.state.finished_blocks_at_report = finished_blocks;
      b.state.finished_at_report = finished;
    }
    if (!b.state.hashing || *b.state.hashing != wire.hashing) {
      b.state.hashing = wire.hashing;
      std::optional<PrefixHashing> first;
      for (const std::unique_ptr<Backend>& other : backends_)
        if (other->state.hashing) {
          first = other->state.hashing;
          break;
        }
      for (std::unique_ptr<Backend>& other : backends_)
        other->state.hashing_mismatch = other->state.hashing && *other->state.hashing != *first;
    }
    // Only the routing group is indexed (its blocks form the prefix chains a request's hashes
    // walk); the other groups' events are counted and skipped.
    const auto routing = static_cast<uint16_t>(wire.hashing.routing_group);
    if (page.snapshot) {
      std::vector<std::pair<BlockHash, MediumMask>> blocks;
      blocks.reserve(page.blocks.size());
      for (const api::KVSnapshotBlock& sb : page.blocks)
        if (sb.group == routing) blocks.emplace_back(sb.hash, sb.media);
      index_.replace(i, blocks);
      ++b.state.snapshots;
    } else {
      for (const api::KVEventRecord& e : page.events)
        if (e.group == routing) index_.apply(i, e.hash, e.medium, e.present);
      b.state.events += page.events.size();
    }
    b.state.epoch = page.epoch;
    b.state.last_seq = page.last_seq;
    if (!page.more) return;
  }
}

std::optional<PrefixHashing> BackendPool::hashing() const {
  std::lock_guard lock(mutex_);
  for (const std::unique_ptr<Backend>& b : backends_)
    if (b->state.hashing) return b->state.hashing;
  return std::nullopt;
}

std::vector<BackendView> BackendPool::views(std::span<const BlockHash> hashes) const {
  std::lock_guard lock(mutex_);
  std::vector<BackendView> out(backends_.size());
  for (size_t i = 0; i < backends_.size(); ++i) {
    const BackendState& s = backends_[i]->state;
    out[i].healthy = s.healthy && !s.removed;
    out[i].in_flight = s.in_flight;
    out[i].load_blocks = s.load_blocks;
    if (s.reported) {
      const int reported_requests =
          std::max(0, s.reported->running + s.reported->waiting - (s.finished_total - s.finished_at_report));
      const int64_t reported_blocks =
          std::max<int64_t>(0, s.reported->load_blocks() - (s.finished_blocks_total - s.finished_blocks_at_report));
      out[i].in_flight = std::max(out[i].in_flight, reported_requests);
      out[i].load_blocks = std::max(out[i].load_blocks, reported_blocks);
    }
    if (!s.hashing_mismatch) out[i].overlap = index_.overlap(static_cast<int>(i), hashes);
  }
  return out;
}

void BackendPool::dispatched(int backend, int64_t blocks) {
  std::lock_guard lock(mutex_);
  BackendState& s = at(backend).state;
  ++s.in_flight;
  s.load_blocks += blocks;
  ++s.routed;
}

void BackendPool::finished(int backend, int64_t blocks, bool failed) {
  std::lock_guard lock(mutex_);
  BackendState& s = at(backend).state;
  --s.in_flight;
  s.load_blocks -= blocks;
  if (failed) ++s.failed;
  s.finished_blocks_total += blocks;
  ++s.finished_total;
}

void BackendPool::mark_down(int backend, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!at(backend).state.removed) take_down(backend, why);
}

std::vector<BackendState> BackendPool::states() const {
  std::lock_guard lock(mutex_);
  std::vector<BackendState> out;
  for (size_t i = 0; i < backends_.size(); ++i) {
    BackendState s = backends_[i]->state;
    for (int m = 0; m < kNumMedia; ++m) s.index_blocks[m] = index_.size(static_cast<int>(i), static_cast<Medium>(m));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace pagedkv::router
