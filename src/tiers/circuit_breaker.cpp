#include "pagedkv/tiers/circuit_breaker.h"

#include <algorithm>

namespace pagedkv {

bool CircuitBreaker::allow(Clock::time_point now) const {
  std::lock_guard lock(m_);
  return !open_ || now >= retry_at_;
}

bool CircuitBreaker::on_success() {
  std::lock_guard lock(m_);
  backoff_ = initial_;
  if (!open_) return false;
  open_ = false;
  reason_.clear();
  return true;
}

bool CircuitBreaker::on_failure(std::string reason, Clock::time_point now) {
  std::lock_guard lock(m_);
  const bool first = !open_;
  if (first) ++trips_;
  open_ = true;
  retry_at_ = now + backoff_;
  backoff_ = std::min(max_, backoff_ * 2);
  reason_ = std::move(reason);
  return first;
}

bool CircuitBreaker::open() const {
  std::lock_guard lock(m_);
  return open_;
}

std::string CircuitBreaker::reason() const {
  std::lock_guard lock(m_);
  return reason_;
}

uint64_t CircuitBreaker::trips() const {
  std::lock_guard lock(m_);
  return trips_;
}

}  // namespace pagedkv
