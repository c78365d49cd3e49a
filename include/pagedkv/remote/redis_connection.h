// RedisConnection: one hiredis connection to one Redis node, as the remote tier's stores use it:
// connect with timeouts (and AUTH, SELECT), queue pipelined commands, write them out in pieces,
// read the replies one by one. Besides hiredis' blocking calls it has a pipeline of its own for
// serving several nodes from one thread without blocking on any (resp_command_queue.h,
// resp_reader.h): values are written from and read into place. A failed connect, write or read
// closes it and error() says why; the next connect() opens a new one. One thread at a time.
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "pagedkv/remote/redis_url.h"
#include "pagedkv/remote/resp_command_queue.h"
#include "pagedkv/remote/resp_reader.h"

struct redisContext;
struct redisReply;

namespace pagedkv::remote {

struct RedisReplyDeleter {
  void operator()(redisReply* r) const;
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

struct RedisConnectionOptions {
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds io_timeout{200};  // every read and write on the socket
  bool keep_read_buffer = false;  // see RedisStoreOptions
};

class RedisConnection {
 public:
  RedisConnection(RedisUrl url, RedisConnectionOptions options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects when not connected; false (error() says why) when that fails. AUTH refused is a
  // failure too.
  bool connect();
  bool connected() const { return c_ != nullptr; }
  // Queues one command (arguments binary-safe); nothing is sent yet.
  void append(std::initializer_list<std::string_view> args);
  // Bytes queued and not yet written.
  size_t queued_bytes() const;
  // Writes out everything queued. False on an I/O failure (closed).
  bool write_queued();
  // Sends what is queued and reads the next reply; null on an I/O failure (closed).
  RedisReply read_reply();
  // One command, sent and answered; null on an I/O failure.
  RedisReply command(std::initializer_list<std::string_view> args);

  // The pipeline of one thread serving several connections (poll() on their sockets); not mixed
  // with append() and read_reply() while replies are outstanding:
  int fd() const;
  // Queues one command; arguments of RespCommandQueue::kReferencedBytes or more are written from
  // the caller's memory, which must stay valid until pipeline_queued() is false.
  void pipeline_append(std::initializer_list<std::string_view> args) { out_.add(args); }
  bool pipeline_queued() const { return !out_.empty(); }
  // Writes what the socket takes now. False on an error (closed).
  bool pipeline_write();
  // Reads what the socket holds now. False on EOF or an error (closed).
  bool pipeline_read();
  // The next reply already read: kReply, kIncomplete (none complete yet) or kBad (a protocol
  // error: closed). The reply's string is valid until the next pipeline_read().
  RespReader::Next pipeline_reply(RespReply& out);
  // Closes after a wait for this socket ran out (timed_out() is then true).
  void time_out();

  void close(std::string why);
  const std::string& error() const { return error_; }
  // The last I/O failure was a socket timeout (a slow or stopped server, not a dead socket).
  bool timed_out() const { return timed_out_; }
  const RedisUrl& url() const { return url_; }

 private:
  bool refuse(std::string why);  // close() for connect()
  void io_failed();

  RedisUrl url_;
  RedisConnectionOptions options_;
  redisContext* c_ = nullptr;
  RespCommandQueue out_;
  RespReader in_;
  std::string error_;
  bool timed_out_ = false;
};

}  // namespace pagedkv::remote
