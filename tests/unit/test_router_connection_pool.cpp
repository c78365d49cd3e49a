// The router's kept-alive connections to a backend (router/connection_pool.h) against a small
// cpp-httplib server on loopback that records each request's client port: sequential calls share
// one connection; a connection the backend closed while it idled in the pool is replaced without
// failing the call; connections idle past the pool's limit are not used; a cancelled exchange's
// connection is never given back. Runs under TSan in scripts/test.sh (an UpstreamCall's thread,
// cancel() from another, and the pool's lock meet here).
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/router/connection_pool.h"
#include "pagedkv/router/upstream_call.h"

namespace pagedkv::router {
namespace {

using namespace std::chrono_literals;

class RecordingBackend {
 public:
  explicit RecordingBackend(int keep_alive_seconds) {
    server_.set_keep_alive_timeout(keep_alive_seconds);
    server_.set_keep_alive_max_count(1000);  // as pagedkv serve (cpp-httplib closes after 5 by default)
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mutex_);
        ports_.push_back(req.remote_port);
      }
      if (req.body == "slow") std::this_thread::sleep_for(2s);
      res.set_content(R"({"ok": true})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~RecordingBackend() {
    server_.stop();
    thread_.join();
  }
  BackendAddress address() const { return BackendAddress::parse("http://127.0.0.1:" + std::to_string(port_)); }
  std::vector<int> ports() const {
    std::lock_guard lock(mutex_);
    return ports_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<int> ports_;
};

// One exchange to the end: its status, or -1 if it failed.
int call(const BackendAddress& backend, ConnectionPool& pool, const std::string& body = "{}") {
  UpstreamCall c(backend, "/v1/completions", body, UpstreamOptions{}, "id-1", &pool);
  if (c.wait_headers(10s) == UpstreamCall::State::kFailed) return -1;
  UpstreamCall::State state = UpstreamCall::State::kHeaders;
  for (int i = 0; i < 500 && state != UpstreamCall::State::kDone && state != UpstreamCall::State::kFailed; ++i)
    c.take_body(20ms, state);
  return state == UpstreamCall::State::kDone ? c.status() : -1;
}

TEST(RouterConnectionPool, SequentialCallsShareOneConnection) {
  RecordingBackend backend(5);
  ConnectionPool pool;
  for (int i = 0; i < 6; ++i) ASSERT_EQ(call(backend.address(), pool), 200);
  const std::vector<int> ports = backend.ports();
  EXPECT_EQ(std::set<int>(ports.begin(), ports.end()).size(), 1u);
  EXPECT_EQ(pool.reused(), 5u);
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(RouterConnectionPool, AConnectionTheBackendClosedIsReplacedWithoutFailing) {
  RecordingBackend backend(1);  // closes connections idle for a second
  ConnectionPool pool(10s);  // which the pool would still hand out
  ASSERT_EQ(call(backend.address(), pool), 200);
  std::this_thread::sleep_for(1600ms);
  ASSERT_EQ(call(backend.address(), pool), 200);  // the reused connection fails; a fresh one answers
  ASSERT_EQ(call(backend.address(), pool), 200);
  const std::vector<int> ports = backend.ports();
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_NE(ports[0], ports[1]);
  EXPECT_EQ(ports[1], ports[2]);
}

TEST(RouterConnectionPool, IdleConnectionsPastTheLimitAreNotUsed) {
  RecordingBackend backend(5);
  ConnectionPool pool(200ms);
  ASSERT_EQ(call(backend.address(), pool), 200);
  std::this_thread::sleep_for(400ms);
  ASSERT_EQ(call(backend.address(), pool), 200);
  const std::vector<int> ports = backend.ports();
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_NE(ports[0], ports[1]);
  EXPECT_EQ(pool.reused(), 0u);
}

TEST(RouterConnectionPool, ACancelledExchangeGivesNothingBack) {
  RecordingBackend backend(5);
  ConnectionPool pool;
  {
    UpstreamCall c(backend.address(), "/v1/completions", "slow", UpstreamOptions{}, "id-2", &pool);
    std::this_thread::sleep_for(100ms);
    c.cancel();
  }
  EXPECT_EQ(pool.idle(), 0u);
  ASSERT_EQ(call(backend.address(), pool), 200);
  EXPECT_EQ(pool.idle(), 1u);
}

}  // namespace
}  // namespace pagedkv::router
