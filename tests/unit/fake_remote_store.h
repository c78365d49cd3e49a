// An in-memory RemoteStore for the tier tests: a map shared by every connection made from one
// backend (as processes share one Redis), with switches for the faults a real store shows:
// down (every call fails as a dead link would), full (writes refused for memory), slow.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/tiers/remote_store.h"

namespace pagedkv::testing {

struct FakeRemoteBackend {
  mutable std::mutex m;
  std::map<std::string, std::vector<std::byte>> data;
  std::atomic<bool> down{false};
  std::atomic<bool> full{false};
  std::atomic<int> delay_ms{0};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> sets{0};

  size_t size() const {
    std::lock_guard lock(m);
    return data.size();
  }
  std::vector<std::string> keys() const {
    std::lock_guard lock(m);
    std::vector<std::string> k;
    for (const auto& [key, v] : data) k.push_back(key);
    return k;
  }
  std::vector<std::byte> value(const std::string& key) const {
    std::lock_guard lock(m);
    auto it = data.find(key);
    return it == data.end() ? std::vector<std::byte>{} : it->second;
  }
  void put(const std::string& key, std::vector<std::byte> v) {
    std::lock_guard lock(m);
    data[key] = std::move(v);
  }
  void clear() {
    std::lock_guard lock(m);
    data.clear();
  }
};

class FakeRemoteStore final : public RemoteStore {
 public:
  explicit FakeRemoteStore(std::shared_ptr<FakeRemoteBackend> b) : b_(std::move(b)) {}

  RemoteStatus exists(std::span<const std::string> keys, std::vector<uint8_t>& present) override {
    present.assign(keys.size(), 0);
    if (!enter()) return RemoteStatus::kUnavailable;
    std::lock_guard lock(b_->m);
    for (size_t i = 0; i < keys.size(); ++i) present[i] = b_->data.contains(keys[i]) ? 1 : 0;
    return RemoteStatus::kOk;
  }
  RemoteStatus get(std::span<const std::string> keys,
                   const std::function<void(size_t, std::span<const std::byte>)>& on_value) override {
    if (!enter()) return RemoteStatus::kUnavailable;
    for (size_t i = 0; i < keys.size(); ++i) {
      std::vector<std::byte> v;
      {
        std::lock_guard lock(b_->m);
        auto it = b_->data.find(keys[i]);
        if (it == b_->data.end()) continue;
        v = it->second;  // a copy, as a client's reply is
      }
      on_value(i, v);
    }
    return RemoteStatus::kOk;
  }
  RemoteStatus set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                   std::vector<uint8_t>& stored) override {
    stored.assign(keys.size(), 0);
    if (!enter()) return RemoteStatus::kUnavailable;
    if (b_->full.load()) {
      error_ = "OOM command not allowed when used memory > 'maxmemory'.";
      return RemoteStatus::kFull;
    }
    std::lock_guard lock(b_->m);
    for (size_t i = 0; i < keys.size(); ++i) {
      b_->data[keys[i]].assign(values[i].begin(), values[i].end());
      stored[i] = 1;
      ++b_->sets;
    }
    return RemoteStatus::kOk;
  }
  RemoteStatus ping() override { return enter() ? RemoteStatus::kOk : RemoteStatus::kUnavailable; }
  std::string last_error() const override { return error_; }

 private:
  bool enter() {
    ++b_->calls;
    if (int ms = b_->delay_ms.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    if (b_->down.load()) {
      error_ = "connection refused";
      return false;
    }
    return true;
  }
  std::shared_ptr<FakeRemoteBackend> b_;
  std::string error_;
};

inline RemoteStoreFactory fake_remote(std::shared_ptr<FakeRemoteBackend> b) {
  return [b] { return std::make_unique<FakeRemoteStore>(b); };
}

}  // namespace pagedkv::testing
