// ConnectionPool: kept-alive HTTP connections to the backends, reused across requests so a
// request does not pay a TCP connect (and the backend an accept) each time.
//
// A connection goes back to the pool only after an exchange that ended cleanly (the whole answer
// read, not cancelled). Backends close idle connections after their keep-alive timeout (pagedkv
// serve: 5 s), and cpp-httplib's client cannot tell a closed connection before it writes on it,
// so the pool forgets connections idle longer than max_idle (1 s by default), and UpstreamCall
// retries, once and on a fresh connection, an exchange that failed on a reused one before any
// byte of answer (the backend closed it: the request was never read).
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace pagedkv::router {

struct BackendAddress;

class ConnectionPool {
 public:
  explicit ConnectionPool(std::chrono::milliseconds max_idle = std::chrono::milliseconds(1000),
                          size_t max_per_backend = 64);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // An idle connection to `backend` younger than max_idle, or null (the caller opens one).
  std::unique_ptr<httplib::Client> take(const BackendAddress& backend);
  // A connection whose last exchange ended cleanly, for the next request to `backend`.
  void give_back(const BackendAddress& backend, std::unique_ptr<httplib::Client> client);

  size_t idle() const;  // connections waiting in the pool now
  uint64_t reused() const;  // take() calls that found one
 private:
  struct Idle {
    std::unique_ptr<httplib::Client> client;
    std::chrono::steady_clock::time_point since;
  };
  const std::chrono::milliseconds max_idle_;
  const size_t max_per_backend_;
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<Idle>> idle_;  // by backend URL, most recent last
  uint64_t reused_ = 0;
};

}  // namespace pagedkv::router
