// BackendPool: the engine instances behind the router — their health, their load as the router
// placed it, and the KV index built from their events.
//
// One monitor thread per backend (a slow or hung backend delays nobody else) checks GET /health
// every health_interval and reads GET /kv_events every events_interval: everything after the
// last sequence number it applied, or a snapshot when the backend restarted (a new epoch), when
// the router fell behind the backend's log, or after an error. So an index entry outlives its
// block by at most one events_interval (plus a poll) while the backend lives; a backend that
// stops answering is taken out of the rotation and its index dropped within one health_interval
// plus the timeout, and comes back (from a snapshot) once /health answers 200 again.
//
// Membership changes while the router runs (a watched backends file, the admin endpoint): add()
// starts a backend's monitor, remove() takes it out of the rotation, drops its index and stops
// its monitor; requests already there finish. A backend keeps its index for the pool's life (a
// removed one is a retired slot, revived if its address comes back), so an index held by a
// request in flight never names another instance.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pagedkv/api/instance_load.h"
#include "pagedkv/api/kv_event_log.h"
#include "pagedkv/router/kv_index.h"
#include "pagedkv/router/routing_policy.h"

namespace httplib {
class Client;
}

namespace pagedkv::router {

using api::PrefixHashing;

// http://host:port (a trailing slash is dropped). Throws ConfigError for anything else.
struct BackendAddress {
  std::string url;
  std::string host;
  int port = 0;
  static BackendAddress parse(std::string_view url);
};

// At most this many distinct addresses over the pool's life (removed ones included).
inline constexpr int kMaxBackends = 1024;

struct BackendPoolOptions {
  std::chrono::milliseconds events_interval{50};
  std::chrono::milliseconds health_interval{500};
  std::chrono::milliseconds timeout{2000};  // connect and read of one poll
  size_t max_events_per_poll = 10000;
  std::string api_key;  // sent to the backends as a bearer token
};

// One backend as the router sees it (a copy: for /router/state and the metrics).
struct BackendState {
  BackendAddress address;
  bool removed = false;  // taken out by remove(): never in the rotation until added again
  bool healthy = false;  // in the rotation: /health answered 200 and no request failed to connect since
  bool reachable = false;  // answered at all (a draining backend is reachable, not healthy)
  std::string last_error;
  uint64_t epoch = 0;  // of its event log; 0: none yet (the next read asks for a snapshot)
  uint64_t last_seq = 0;
  std::optional<PrefixHashing> hashing;
  bool hashing_mismatch = false;  // hashes blocks unlike the first backend: no prefix credit
  int in_flight = 0;  // the requests this router placed there and that have not finished
  int64_t load_blocks = 0;  // their KV blocks, as estimated when placed
  // The backend's own load from its last events page (every router's requests and direct
  // clients' alike); none while it is down or has not reported.
  std::optional<api::InstanceLoad> reported;
  // This router's requests there that finished, all told and when the reported page was asked
  // for: those that finished since still count in the report (it is up to one events interval
  // old), so their blocks are taken off it — without that, a session's next turn would find its
  // own previous turn still counted there.
  int64_t finished_blocks_total = 0, finished_blocks_at_report = 0;
  int finished_total = 0, finished_at_report = 0;
  uint64_t routed = 0, failed = 0, snapshots = 0, events = 0, poll_errors = 0, went_down = 0;
  size_t index_blocks[kNumMedia] = {0, 0, 0};
};

class BackendPool {
 public:
  // `backends` may be empty when members are added later (the router answers 503 meanwhile).
  BackendPool(std::vector<BackendAddress> backends, BackendPoolOptions options);
  ~BackendPool();  // stop()
  BackendPool(const BackendPool&) = delete;
  BackendPool& operator=(const BackendPool&) = delete;

  void start();  // the monitor threads
  void stop();
  // True once every backend in the pool has been checked at least once (answered or failed).
  bool wait_until_checked(std::chrono::milliseconds timeout) const;

  // Membership. add() of a present address changes nothing; of a removed one revives its slot
  // (its index starts again from a snapshot). Throws ConfigError past kMaxBackends addresses.
  enum class Added { kAdded, kRestored, kPresent };
  Added add(const BackendAddress& address);
  bool remove(const std::string& url);  // false: no such backend in the pool (or removed already)
  // Makes the pool's members the given addresses plus those added by add() with pinned = true
  // (the command line's): others are removed. Returns how many were added and removed.
  std::pair<int, int> sync(const std::vector<BackendAddress>& addresses);
  void pin(int backend);

  // Slots, removed ones included: backend indices are [0, size()).
  int size() const;
  // A slot's address never changes: the reference stays valid for the pool's life.
  const BackendAddress& address(int backend) const;
  // The block hashing the backends use (the first one that reported it), if any has.
  std::optional<PrefixHashing> hashing() const;
  // Every backend's view for one request whose block hashes (under hashing()) are `hashes`. Its
  // load is the larger of this router's own accounting (it includes requests placed since the
  // backend last reported) and the backend's reported load (it includes everyone else's).
  std::vector<BackendView> views(std::span<const BlockHash> hashes) const;

  // The router's own accounting of what it placed: a request sent to `backend` holding about
  // `blocks` KV blocks until it finishes.
  void dispatched(int backend, int64_t blocks);
  void finished(int backend, int64_t blocks, bool failed);
  // A request could not reach `backend`: out of the rotation (and its index dropped) until its
  // /health answers again.
  void mark_down(int backend, const std::string& why);

  std::vector<BackendState> states() const;

 private:
  struct Backend;
  int find(const std::string& url) const;  // a slot's index or -1 (mutex_ held)
  void start_monitor(int backend);  // mutex_ held
  void monitor(int backend, uint64_t generation);
  // Whether the monitor of `generation` still owns `backend` (mutex_ held).
  bool current(int backend, uint64_t generation) const;
  void check_health(int backend, uint64_t generation, httplib::Client& client);
  void read_events(int backend, uint64_t generation, httplib::Client& client);
  void take_down(int backend, const std::string& why);  // mutex_ held
  Backend& at(int backend);  // mutex_ held
  const Backend& at(int backend) const;  // mutex_ held

  BackendPoolOptions options_;
  // Slots are never erased or moved: address() hands out references into them.
  std::vector<std::unique_ptr<Backend>> backends_;
  mutable std::mutex mutex_;  // backends_ (the vector and every slot's state) and index_
  KVIndex index_;
  bool started_ = false;  // mutex_
  std::atomic<bool> stopping_{false};
  std::mutex sleep_mutex_;
  std::condition_variable sleep_;
};

struct BackendPool::Backend {
  BackendState state;
  bool checked = false;
  bool pinned = false;  // given on the command line: sync() leaves it
  uint64_t generation = 0;  // bumped by remove() and a revival: an older monitor stops
  std::thread monitor;
};

}  // namespace pagedkv::router
