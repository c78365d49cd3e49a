// RespReader: the replies of a Redis pipeline (RESP2), read in place from a buffer the socket is
// read into. A bulk string (a GET's value) is handed out as a view of that buffer, so a value
// crosses user memory once, from the kernel into the buffer, instead of three times through
// hiredis (its read chunk, its reader's buffer, the reply object). Only single-value replies are
// accepted (status, error, integer, bulk string, nil): an array or an unknown type byte, a bad
// length, a missing CRLF or a string longer than the limit is a protocol error that names what
// came, and the stream is unusable after it (the connection is closed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace pagedkv::remote {

struct RespReply {
  enum class Type : uint8_t { kStatus, kError, kInteger, kString, kNil };
  Type type = Type::kNil;
  int64_t integer = 0;  // kInteger
  std::string_view str;  // kStatus, kError, kString: valid until the reader's buffer is written again
};

class RespReader {
 public:
  static constexpr size_t kInitialBytes = size_t{256} << 10;
  static constexpr size_t kMaxLineBytes = size_t{64} << 10;  // a status, an error, a length
  // Redis' own limit on a string (proto-max-bulk-len's default): longer ones are garbage.
  static constexpr size_t kDefaultMaxStringBytes = size_t{512} << 20;

  explicit RespReader(size_t max_string_bytes = kDefaultMaxStringBytes) : max_string_(max_string_bytes) {}

  // Where the next read goes: at least `min_bytes`, and room for the whole of a reply already
  // begun. Moves unread bytes to the front or grows the buffer, so it invalidates every view
  // handed out before.
  std::span<char> space(size_t min_bytes);
  // `n` bytes were read into space().
  void produced(size_t n) { end_ += n; }

  enum class Next : uint8_t { kReply, kIncomplete, kBad };
  // The next complete reply (kReply), or kIncomplete until more bytes come, or kBad: error() says
  // what was wrong, and every later call answers kBad.
  Next next(RespReply& out);
  const std::string& error() const { return error_; }

  size_t buffered() const { return end_ - begin_; }
  // Forgets everything (the connection closed). The buffer's memory is kept: the views handed out
  // before stay readable, unchanged, until the next space() (a caller may still hand on the
  // replies it took before the connection failed).
  void reset();

 private:
  Next bad(std::string why);

  size_t max_string_;
  std::unique_ptr<char[]> buf_;
  size_t capacity_ = 0, begin_ = 0, end_ = 0;
  size_t reply_bytes_ = 0;  // the whole size of the incomplete string reply at begin_, once known
  std::string error_;
};

}  // namespace pagedkv::remote
