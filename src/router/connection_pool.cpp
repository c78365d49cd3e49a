#include "pagedkv/router/connection_pool.h"

#include <httplib.h>

#include "pagedkv/router/backend_pool.h"

namespace pagedkv::router {

ConnectionPool::ConnectionPool(std::chrono::milliseconds max_idle, size_t max_per_backend)
    : max_idle_(max_idle), max_per_backend_(max_per_backend) {}

ConnectionPool::~ConnectionPool() = default;

std::unique_ptr<httplib::Client> ConnectionPool::take(const BackendAddress& backend) {
  std::vector<std::unique_ptr<httplib::Client>> expired;  // closed outside the lock
  std::unique_ptr<httplib::Client> found;
  {
    std::lock_guard lock(mutex_);
    auto it = idle_.find(backend.url);
    if (it == idle_.end()) return nullptr;
    std::vector<Idle>& list = it->second;
    const auto now = std::chrono::steady_clock::now();
    while (!list.empty()) {
      Idle last = std::move(list.back());
      list.pop_back();
      if (now - last.since <= max_idle_) {
        found = std::move(last.client);
        ++reused_;
        break;
      }
      expired.push_back(std::move(last.client));
    }
    // Whatever is older than the newest expired one is older still.
    if (!expired.empty()) {
      for (Idle& i : list) expired.push_back(std::move(i.client));
      list.clear();
    }
  }
  return found;
}

void ConnectionPool::give_back(const BackendAddress& backend, std::unique_ptr<httplib::Client> client) {
  std::unique_ptr<httplib::Client> dropped;
  std::lock_guard lock(mutex_);
  std::vector<Idle>& list = idle_[backend.url];
  if (list.size() >= max_per_backend_) {
    dropped = std::move(list.front().client);  // the oldest goes
    list.erase(list.begin());
  }
  list.push_back({std::move(client), std::chrono::steady_clock::now()});
}

size_t ConnectionPool::idle() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [url, list] : idle_) n += list.size();
  return n;
}

uint64_t ConnectionPool::reused() const {
  std::lock_guard lock(mutex_);
  return reused_;
}

}  // namespace pagedkv::router
