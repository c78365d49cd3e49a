#include "pagedkv/remote/redis_connection.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace pagedkv::remote {
namespace {

// One recv() takes up to the read buffer's free room, at least this much: a pipeline of 20 KiB
// values comes in a few large reads, not one per 16 KiB as with hiredis.
constexpr size_t kMinReadBytes = size_t{128} << 10;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

void RedisReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

RedisConnection::RedisConnection(RedisUrl url, RedisConnectionOptions options)
    : url_(std::move(url)), options_(options) {}

RedisConnection::~RedisConnection() {
  if (c_) redisFree(c_);
}

void RedisConnection::close(std::string why) {
  error_ = std::move(why);
  out_.clear();
  in_.reset();
  if (c_) {
    redisFree(c_);
    c_ = nullptr;
  }
}

bool RedisConnection::refuse(std::string why) {
  timed_out_ = false;
  close(std::move(why));
  return false;
}

void RedisConnection::io_failed() {
  // A blocking call failed because the socket timed out: hiredis reports EAGAIN.
  timed_out_ = c_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
  close(timed_out_ ? "timed out" : std::string(c_->errstr));
}

bool RedisConnection::connect() {
  if (c_) return true;
  c_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(options_.connect_timeout));
  if (c_ == nullptr) return refuse("cannot allocate a connection");
  if (c_->err) return refuse(fmt::format("connect to {}:{}: {}", url_.host, url_.port, c_->errstr));
  if (redisSetTimeout(c_, to_timeval(options_.io_timeout)) != REDIS_OK) return refuse("cannot set the socket timeout");
  redisEnableKeepAlive(c_);
  if (options_.keep_read_buffer) c_->reader->maxbuf = 0;
  if (!url_.password.empty()) {
    RedisReply r = url_.user.empty() ? command({"AUTH", url_.password}) : command({"AUTH", url_.user, url_.password});
    if (!r) return refuse(fmt::format("AUTH: {}", error_));
    if (r->type == REDIS_REPLY_ERROR) return refuse(fmt::format("AUTH refused: {}", r->str));
  }
  if (url_.db != 0) {
    const std::string db = std::to_string(url_.db);
    RedisReply r = command({"SELECT", db});
    if (!r) return refuse(fmt::format("SELECT: {}", error_));
    if (r->type == REDIS_REPLY_ERROR) return refuse(fmt::format("SELECT {}: {}", db, r->str));
  }
  return true;
}

void RedisConnection::append(std::initializer_list<std::string_view> args) {
  const char* argv[8];
  size_t lens[8];
  int n = 0;
  for (std::string_view a : args) {
    if (n == 8) break;  // no command here has more arguments
    argv[n] = a.data();
    lens[n] = a.size();
    ++n;
  }
  redisAppendCommandArgv(c_, n, argv, lens);
}

size_t RedisConnection::queued_bytes() const { return c_ ? sdslen(c_->obuf) : 0; }

bool RedisConnection::write_queued() {
  for (int done = 0; !done;) {
    if (redisBufferWrite(c_, &done) != REDIS_OK) {
      io_failed();
      return false;
    }
  }
  return true;
}

RedisReply RedisConnection::read_reply() {
  void* raw = nullptr;
  if (redisGetReply(c_, &raw) != REDIS_OK || raw == nullptr) {
    io_failed();
    return nullptr;
  }
  return RedisReply(static_cast<redisReply*>(raw));
}

RedisReply RedisConnection::command(std::initializer_list<std::string_view> args) {
  append(args);
  return read_reply();
}

int RedisConnection::fd() const { return c_ ? c_->fd : -1; }

bool RedisConnection::pipeline_write() {
  if (out_.write_to(c_->fd) != RespCommandQueue::Write::kFailed) return true;
  timed_out_ = false;
  close(fmt::format("write: {}", std::strerror(errno)));
  return false;
}

bool RedisConnection::pipeline_read() {
  for (;;) {
    const std::span<char> room = in_.space(kMinReadBytes);
    const ssize_t n = ::recv(c_->fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n > 0) {
      in_.produced(static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    timed_out_ = false;
    close(n == 0 ? std::string("server closed the connection") : fmt::format("read: {}", std::strerror(errno)));
    return false;
  }
}

RespReader::Next RedisConnection::pipeline_reply(RespReply& out) {
  const RespReader::Next r = in_.next(out);
  if (r == RespReader::Next::kBad) {
    timed_out_ = false;
    close(in_.error());
  }
  return r;
}

void RedisConnection::time_out() {
  timed_out_ = true;
  close("timed out");
}

}  // namespace pagedkv::remote
