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

struct BackendPoolOptions {
  std::chrono::milliseconds events_interval{50};
  std::chrono::milliseconds health_interval{500};
  std::chrono::milliseconds timeout{2000};  // connect and read of one poll
  size_t max_events_per_poll = 10000;
  std::string api_key;                      // sent to the backends as a bearer token
};

// One backend as the router sees it (a copy: for /router/state and the metrics).
struct BackendState {
  BackendAddress address;
  bool healthy = false;     // in the rotation: /health answered 200 and no request failed to connect since
  bool reachable = false;   // answered at all (a draining backend is reachable, not healthy)
  std::string last_error;
  uint64_t epoch = 0;       // of its event log; 0: none yet (the next read asks for a snapshot)
  uint64_t last_seq = 0;
  std::optional<PrefixHashing> hashing;
  bool hashing_mismatch = false;  // hashes blocks unlike the first backend: no prefix credit
  int in_flight = 0;         // the requests this router placed there and that have not finished
  int64_t load_blocks = 0;   // their KV blocks, as estimated when placed
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
  BackendPool(std::vector<BackendAddress> backends, BackendPoolOptions options);
  ~BackendPool();  // stop()
  BackendPool(const BackendPool&) = delete;
  BackendPool& operator=(const BackendPool&) = delete;

  void start();  // the monitor threads
  void stop();
  // True once every backend has been checked at least once (answered or failed).
  bool wait_until_checked(std::chrono::milliseconds timeout) const;

  int size() const { return static_cast<int>(backends_.size()); }
  // Immutable after construction: read without the lock.
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
  void monitor(int backend);
  void check_health(int backend, httplib::Client& client);
  void read_events(int backend, httplib::Client& client);
  void take_down(Backend& b, const std::string& why);  // mutex_ held

  BackendPoolOptions options_;
  std::vector<Backend> backends_;
  mutable std::mutex mutex_;  // backends_' state and index_
  KVIndex index_;
  std::atomic<bool> stopping_{false};
  std::mutex sleep_mutex_;
  std::condition_variable sleep_;
  std::vector<std::thread> threads_;
};

struct BackendPool::Backend {
  BackendState state;
  bool checked = false;
};

}  // namespace pagedkv::router
