// UpstreamCall: one request forwarded to a backend, run on its own thread, with the backend's
// answer handed over as it arrives.
//
// The router must know the backend's status before it answers its own client (a 400 or a 503
// passes through; a refused connection is retried elsewhere), yet stream the body chunk by
// chunk; cpp-httplib's client blocks for the whole exchange. So the exchange runs on a thread
// that records the status and headers, then appends the body as it comes; the HTTP handler waits
// for the headers and relays the body. cancel() closes the connection to the backend, which
// cancels the request there (pagedkv serve aborts the engine request of a client that left).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "pagedkv/router/backend_pool.h"
#include "pagedkv/router/connection_pool.h"

namespace httplib {
class Client;
}

namespace pagedkv::router {

struct UpstreamOptions {
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds read_timeout{600'000};  // between two reads: a long prefill is silent
  std::string api_key;  // sent to the backend as a bearer token
};

class UpstreamCall {
 public:
  enum class State { kWaiting, kHeaders, kDone, kFailed };

  // Starts the exchange: POST `path` with `body` (JSON) to `backend`, as request `request_id`
  // (sent as X-Request-Id; api/request_id.h).
  // With `pool`, the exchange reuses a kept-alive connection (retried once on a fresh one if the
  // backend had closed it) and hands its connection back when it ends cleanly.
  UpstreamCall(const BackendAddress& backend, std::string path, std::string body, const UpstreamOptions& options,
               std::string request_id = {}, ConnectionPool* pool = nullptr);
  ~UpstreamCall();  // cancel() and join
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  // Waits up to `timeout` for the headers (or the end); returns the state then.
  State wait_headers(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for body bytes or the end; returns the bytes that arrived since the
  // last call (possibly none) and sets `state`.
  std::string take_body(std::chrono::milliseconds timeout, State& state);

  int status() const;
  std::string content_type() const;
  std::string retry_after() const;
  // The exchange failed before any byte reached the backend (connection refused, unreachable):
  // trying another backend cannot duplicate work.
  bool never_connected() const;
  // The exchange failed after connecting but before any response byte (the backend closed the
  // connection unanswered: a listener stopping with our connection in its backlog, or a crash).
  // The backend may have started the work, but no client saw any of it.
  bool unanswered() const;
  std::string error() const;

  // The client went away: close the connection to the backend.
  void cancel();

 private:
  void run(std::string path, std::string body, std::string api_key, std::string request_id);

  BackendAddress backend_;
  UpstreamOptions options_;
  ConnectionPool* pool_ = nullptr;
  bool reused_connection_ = false;
  std::unique_ptr<httplib::Client> client_;
  std::unique_ptr<httplib::Client> retired_client_;  // a reused connection replaced by a fresh one
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::kWaiting;
  int status_ = 0;
  std::string content_type_, retry_after_;
  std::string body_;
  bool never_connected_ = false;
  bool unanswered_ = false;
  bool cancelled_ = false;
  std::string error_;
  std::thread thread_;
};

}  // namespace pagedkv::router
