// A redis-server of the test's own: on 127.0.0.1, a free port, a temporary directory, no
// persistence; started and stopped by the test (never a system instance), with bounded waits.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/remote/redis_store.h"

namespace pagedkv::testing {

inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("no free loopback port");
  ::close(fd);
  return ntohs(a.sin_port);
}

// A free loopback port whose Redis Cluster bus port (port + 10000) is free too.
inline int free_cluster_port() {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = free_loopback_port();
    if (port + 10000 > 65535) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port + 10000));
    const bool bus_free = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    if (fd >= 0) ::close(fd);
    if (bus_free) return port;
  }
  throw std::runtime_error("no free loopback port pair for a cluster node");
}

class RedisTestServer {
 public:
  // `extra` are redis-server options, e.g. {"--maxmemory", "2mb"}; `pick_port` chooses the port.
  explicit RedisTestServer(std::vector<std::string> extra = {}, int (*pick_port)() = free_loopback_port)
      : extra_(std::move(extra)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pagedkv-redis-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = pick_port();
      if (start()) return;
    }
    throw std::runtime_error("redis-server did not start (is it installed? scripts/setup.sh)");
  }
  ~RedisTestServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisTestServer(const RedisTestServer&) = delete;
  RedisTestServer& operator=(const RedisTestServer&) = delete;

  int port() const { return port_; }
  const std::filesystem::path& dir() const { return dir_; }
  bool running() const { return pid_ > 0; }
  std::string url(const std::string& auth = "", int db = 0) const {
    return "redis://" + auth + "127.0.0.1:" + std::to_string(port_) + "/" + std::to_string(db);
  }
  remote::RedisStoreOptions options(std::chrono::milliseconds timeout = std::chrono::milliseconds(500)) const {
    remote::RedisStoreOptions o;
    o.url = remote::parse_redis_url(url());
    o.connect_timeout = timeout;
    o.io_timeout = timeout;
    return o;
  }

  // (Re)starts on the same port; true once it answers PING (within 10 s).
  bool start() {
    stop();
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir_.string(),
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--loglevel",
                                     "warning",
                                     "--logfile",
                                     (dir_ / "redis.log").string()};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that crashes takes its server with it
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    if (pid_ < 0) return false;
    remote::RedisStoreOptions o = options(std::chrono::milliseconds(200));
    o.url.user.clear();
    o.url.password.clear();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken, bad option
        pid_ = -1;
        return false;
      }
      remote::RedisStore probe(o);
      const RemoteStatus st = probe.ping();
      // An AUTH-protected server answers NOAUTH: it is up.
      if (st == RemoteStatus::kOk || st == RemoteStatus::kError) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
    return false;
  }
  void kill() { signal_and_reap(SIGKILL); }
  void stop() { signal_and_reap(SIGTERM); }
  void pause() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

 private:
  void signal_and_reap(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, sig);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
  }

  std::vector<std::string> extra_;
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace pagedkv::testing
