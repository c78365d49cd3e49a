// RespCommandQueue: a pipeline's commands in Redis' wire format (RESP2 arrays of bulk strings),
// written to a socket without blocking. An argument of at least kReferencedBytes (a SET's value)
// is not copied: the queue keeps a pointer to it and the socket is written with sendmsg() from
// the caller's memory, so a value crosses user memory no more (hiredis formats every command
// into a string of its own, then appends it to its output buffer, then moves what a partial
// write left to that buffer's front). The caller keeps such arguments alive until written.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace pagedkv::remote {

class RespCommandQueue {
 public:
  static constexpr size_t kReferencedBytes = 4096;

  void add(std::initializer_list<std::string_view> args);
  bool empty() const { return next_ == pieces_.size(); }
  size_t bytes() const { return bytes_; }  // queued and not written yet

  enum class Write : uint8_t { kAll, kBlocked, kFailed };
  // Writes as much as the socket takes now: kAll when nothing is left, kBlocked when the socket
  // is full (wait for POLLOUT), kFailed on an error (errno says which).
  Write write_to(int fd);
  void clear();

 private:
  struct Piece {
    const char* referenced;  // the caller's bytes, or null: `copied_` from `offset`
    size_t offset, size;
  };
  void copy(std::string_view s);

  std::string copied_;  // the commands' small parts: headers, names, keys
  std::vector<Piece> pieces_;
  size_t next_ = 0, next_offset_ = 0;  // the first piece not fully written, and how much of it was
  size_t bytes_ = 0;
};

}  // namespace pagedkv::remote
