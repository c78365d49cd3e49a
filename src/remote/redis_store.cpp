#include "pagedkv/remote/redis_store.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "pagedkv/core/error.h"

namespace pagedkv::remote {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

bool is_oom(const redisReply& r) { return r.type == REDIS_REPLY_ERROR && std::strncmp(r.str, "OOM", 3) == 0; }

// A blocking call on `c` failed because the socket timed out (hiredis reports EAGAIN).
bool timed_out(const redisContext* c) { return c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK); }

// hiredis sends with write(), so writing into a socket the server has closed raises SIGPIPE, whose
// default action ends the process. A library must not change the process's signal handling, and
// that signal goes to the writing thread: block it in this thread for one call, and take back a
// SIGPIPE the call raised (the write itself fails with EPIPE, which the call handles).
class SigpipeBlockedInThisThread {
 public:
  SigpipeBlockedInThisThread() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    already_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlockedInThisThread() {
    const int saved_errno = errno;
    sigset_t pending;
    if (!already_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec no_wait{};
      while (sigtimedwait(&pipe_, nullptr, &no_wait) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
    errno = saved_errno;
  }
  SigpipeBlockedInThisThread(const SigpipeBlockedInThisThread&) = delete;
  SigpipeBlockedInThisThread& operator=(const SigpipeBlockedInThisThread&) = delete;

 private:
  sigset_t pipe_{}, previous_{};
  bool already_pending_ = false;
};

}  // namespace

RedisStore::RedisStore(RedisStoreOptions options) : options_(std::move(options)) {}

RedisStore::~RedisStore() {
  if (c_) redisFree(c_);
}

RemoteStatus RedisStore::fail(std::string why) {
  error_ = std::move(why);
  if (c_) {
    redisFree(c_);
    c_ = nullptr;
  }
  return RemoteStatus::kUnavailable;
}

RemoteStatus RedisStore::fail_io() {
  io_timed_out_ = timed_out(c_);
  return fail(io_timed_out_ ? "timed out" : std::string(c_->errstr));
}

bool RedisStore::refuse(std::string why) {
  fail(std::move(why));
  return false;
}

bool RedisStore::connect() {
  if (c_) return true;
  const RedisUrl& u = options_.url;
  c_ = redisConnectWithTimeout(u.host.c_str(), u.port, to_timeval(options_.connect_timeout));
  if (c_ == nullptr) return refuse("cannot allocate a connection");
  if (c_->err) return refuse(fmt::format("connect to {}:{}: {}", u.host, u.port, c_->errstr));
  if (redisSetTimeout(c_, to_timeval(options_.io_timeout)) != REDIS_OK)
    return refuse("cannot set the socket timeout");
  redisEnableKeepAlive(c_);
  if (options_.keep_read_buffer) c_->reader->maxbuf = 0;
  auto command = [&](std::initializer_list<std::string_view> args) -> Reply {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    return Reply(static_cast<redisReply*>(redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data())));
  };
  if (!u.password.empty()) {
    Reply r = u.user.empty() ? command({"AUTH", u.password}) : command({"AUTH", u.user, u.password});
    if (!r) return refuse(fmt::format("AUTH: {}", c_->errstr));
    if (r->type == REDIS_REPLY_ERROR) return refuse(fmt::format("AUTH refused: {}", r->str));
  }
  if (u.db != 0) {
    const std::string db = std::to_string(u.db);
    Reply r = command({"SELECT", db});
    if (!r) return refuse(fmt::format("SELECT: {}", c_->errstr));
    if (r->type == REDIS_REPLY_ERROR) return refuse(fmt::format("SELECT {}: {}", db, r->str));
  }
  return true;
}

template <typename Attempt>
RemoteStatus RedisStore::with_reconnect(Attempt&& attempt) {
  const SigpipeBlockedInThisThread no_sigpipe;
  const bool reused = c_ != nullptr;
  replies_read_ = 0;
  io_timed_out_ = false;
  RemoteStatus st = attempt();
  // A server restart leaves a kept connection dead, and only its next use says so (EOF, a reset,
  // EPIPE). Nothing was answered on it, and EXISTS, GET and SET of content-addressed keys are
  // idempotent: resend once on a new connection. A timeout is a slow server, not a dead socket.
  if (st == RemoteStatus::kUnavailable && reused && replies_read_ == 0 && !io_timed_out_) st = attempt();
  return st;
}

template <typename OnReply>
RemoteStatus RedisStore::read_replies(size_t n, OnReply&& on_reply) {
  for (size_t i = 0; i < n; ++i) {
    void* raw = nullptr;
    if (redisGetReply(c_, &raw) != REDIS_OK || raw == nullptr) return fail_io();
    ++replies_read_;
    Reply r(static_cast<redisReply*>(raw));
    on_reply(i, *r);
  }
  return RemoteStatus::kOk;
}

RemoteStatus RedisStore::exists(std::span<const std::string> keys, std::vector<uint8_t>& present) {
  return with_reconnect([&] { return exists_once(keys, present); });
}

RemoteStatus RedisStore::exists_once(std::span<const std::string> keys, std::vector<uint8_t>& present) {
  present.assign(keys.size(), 0);
  if (keys.empty()) return RemoteStatus::kOk;
  if (!connect()) return RemoteStatus::kUnavailable;
  for (const std::string& k : keys) {
    const char* argv[] = {"EXISTS", k.data()};
    const size_t lens[] = {6, k.size()};
    redisAppendCommandArgv(c_, 2, argv, lens);
  }
  bool error_reply = false;
  const RemoteStatus st = read_replies(keys.size(), [&](size_t i, const redisReply& r) {
    if (r.type == REDIS_REPLY_INTEGER) present[i] = r.integer > 0 ? 1 : 0;
    else if (r.type == REDIS_REPLY_ERROR) {
      error_reply = true;
      error_ = r.str;
    }
  });
  if (st != RemoteStatus::kOk) return st;
  return error_reply ? RemoteStatus::kError : RemoteStatus::kOk;
}

RemoteStatus RedisStore::get(std::span<const std::string> keys,
                             const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
  return with_reconnect([&] { return get_once(keys, on_value); });
}

RemoteStatus RedisStore::get_once(std::span<const std::string> keys,
                             const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
  if (keys.empty()) return RemoteStatus::kOk;
  if (!connect()) return RemoteStatus::kUnavailable;
  bool error_reply = false;
  const size_t depth = std::max<size_t>(1, options_.get_pipeline_depth);
  for (size_t first = 0; first < keys.size(); first += depth) {
    const size_t n = std::min(depth, keys.size() - first);
    for (size_t i = first; i < first + n; ++i) {
      const char* argv[] = {"GET", keys[i].data()};
      const size_t lens[] = {3, keys[i].size()};
      redisAppendCommandArgv(c_, 2, argv, lens);
    }
    const RemoteStatus st = read_replies(n, [&](size_t i, const redisReply& r) {
      if (r.type == REDIS_REPLY_STRING)
        on_value(first + i, std::span<const std::byte>(reinterpret_cast<const std::byte*>(r.str), r.len));
      else if (r.type == REDIS_REPLY_ERROR) {
        error_reply = true;
        error_ = r.str;
      }
    });
    if (st != RemoteStatus::kOk) return st;
  }
  return error_reply ? RemoteStatus::kError : RemoteStatus::kOk;
}

RemoteStatus RedisStore::set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                             std::vector<uint8_t>& stored) {
  return with_reconnect([&] { return set_once(keys, values, stored); });
}

RemoteStatus RedisStore::set_once(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                             std::vector<uint8_t>& stored) {
  stored.assign(keys.size(), 0);
  if (keys.empty()) return RemoteStatus::kOk;
  if (!connect()) return RemoteStatus::kUnavailable;
  for (size_t i = 0; i < keys.size(); ++i) {
    const char* argv[] = {"SET", keys[i].data(), reinterpret_cast<const char*>(values[i].data())};
    const size_t lens[] = {3, keys[i].size(), values[i].size()};
    redisAppendCommandArgv(c_, 3, argv, lens);
    if (options_.write_chunk_bytes > 0 && sdslen(c_->obuf) >= options_.write_chunk_bytes) {  // see RedisStoreOptions
      for (int done = 0; !done;)
        if (redisBufferWrite(c_, &done) != REDIS_OK) return fail_io();
    }
  }
  bool full = false, error_reply = false;
  const RemoteStatus st = read_replies(keys.size(), [&](size_t i, const redisReply& r) {
    if (r.type == REDIS_REPLY_STATUS) {
      stored[i] = 1;
    } else if (r.type == REDIS_REPLY_ERROR) {
      (is_oom(r) ? full : error_reply) = true;
      error_ = r.str;
    }
  });
  if (st != RemoteStatus::kOk) return st;
  return full ? RemoteStatus::kFull : error_reply ? RemoteStatus::kError : RemoteStatus::kOk;
}

RemoteStatus RedisStore::ping() {
  return with_reconnect([&] { return ping_once(); });
}

RemoteStatus RedisStore::ping_once() {
  if (!connect()) return RemoteStatus::kUnavailable;
  const char* argv[] = {"PING"};
  const size_t lens[] = {4};
  redisAppendCommandArgv(c_, 1, argv, lens);
  bool ok = false;
  const RemoteStatus st = read_replies(1, [&](size_t, const redisReply& r) { ok = r.type == REDIS_REPLY_STATUS; });
  if (st != RemoteStatus::kOk) return st;
  return ok ? RemoteStatus::kOk : RemoteStatus::kError;
}

RemoteStoreFactory redis_store_factory(RedisStoreOptions options) {
  return [options] { return std::make_unique<RedisStore>(options); };
}

void use_redis_tier(TierConfig& tiers, const RedisTierSettings& settings) {
  if (settings.timeout_ms < 1)
    throw ConfigError(fmt::format("the remote tier's timeout must be at least 1 ms, got {}", settings.timeout_ms));
  RedisStoreOptions r;
  r.url = parse_redis_url(settings.url);
  r.connect_timeout = std::chrono::milliseconds(settings.timeout_ms);
  r.io_timeout = std::chrono::milliseconds(settings.timeout_ms);
  tiers.remote_description = r.url.redacted();
  tiers.remote_store = redis_store_factory(std::move(r));
  tiers.remote_key_prefix = settings.key_prefix;
  tiers.remote_write_through = settings.write_through;
  tiers.remote_min_blocks = settings.min_blocks;
}

}  // namespace pagedkv::remote
