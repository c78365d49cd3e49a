// A circuit breaker for a link that may fail for a while (the remote tier's store): after a
// failure, calls are refused at once until a retry time, which backs off exponentially while the
// link keeps failing; the first call after it is the probe (half-open), and a success closes it.
// Thread-safe; the first failure of an episode and the recovery are reported once each, so a
// dead link logs one line, not one per call.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

namespace pagedkv {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  CircuitBreaker(std::chrono::milliseconds initial_backoff, std::chrono::milliseconds max_backoff)
      : initial_(initial_backoff), max_(max_backoff), backoff_(initial_backoff) {}

  // True when a call may go out now: closed, or open and its retry time has come.
  bool allow(Clock::time_point now = Clock::now()) const;
  // Returns true when this closed an open breaker (the caller logs the recovery).
  bool on_success();
  // Opens (or keeps open) the breaker until now + backoff, doubling the backoff for the next
  // failure. Returns true for the first failure of an episode (the caller logs it).
  bool on_failure(std::string reason, Clock::time_point now = Clock::now());

  bool open() const;
  std::string reason() const;  // the failure that opened it ("" when closed)
  uint64_t trips() const;  // episodes so far

 private:
  mutable std::mutex m_;
  std::chrono::milliseconds initial_, max_, backoff_;
  bool open_ = false;
  Clock::time_point retry_at_{};
  std::string reason_;
  uint64_t trips_ = 0;
};

}  // namespace pagedkv
