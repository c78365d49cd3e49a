#include "pagedkv/remote/resp_command_queue.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace pagedkv::remote {
namespace {

constexpr size_t kIovecsPerWrite = 256;  // below IOV_MAX (1024)

}  // namespace

void RespCommandQueue::copy(std::string_view s) {
  if (pieces_.empty() || pieces_.back().referenced != nullptr) pieces_.push_back(Piece{nullptr, copied_.size(), 0});
  copied_.append(s);
  pieces_.back().size += s.size();
  bytes_ += s.size();
}

void RespCommandQueue::add(std::initializer_list<std::string_view> args) {
  char number[24];
  auto header = [&](char type, size_t n) {
    number[0] = type;
    char* end = std::to_chars(number + 1, number + sizeof number - 2, n).ptr;
    *end++ = '\r';
    *end++ = '\n';
    copy(std::string_view(number, static_cast<size_t>(end - number)));
  };
  header('*', args.size());
  for (std::string_view a : args) {
    header('$', a.size());
    if (a.size() >= kReferencedBytes) {
      pieces_.push_back(Piece{a.data(), 0, a.size()});
      bytes_ += a.size();
    } else {
      copy(a);
    }
    copy("\r\n");
  }
}

RespCommandQueue::Write RespCommandQueue::write_to(int fd) {
  iovec iov[kIovecsPerWrite];
  while (!empty()) {
    size_t n = 0;
    for (size_t k = next_; k < pieces_.size() && n < kIovecsPerWrite; ++k, ++n) {
      const Piece& p = pieces_[k];
      const char* base = p.referenced ? p.referenced : copied_.data() + p.offset;
      const size_t skip = k == next_ ? next_offset_ : 0;
      iov[n].iov_base = const_cast<char*>(base + skip);
      iov[n].iov_len = p.size - skip;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t w = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Write::kBlocked;
      return Write::kFailed;
    }
    bytes_ -= static_cast<size_t>(w);
    for (size_t left = static_cast<size_t>(w); left > 0;) {
      const size_t in_piece = pieces_[next_].size - next_offset_;
      if (left < in_piece) {
        next_offset_ += left;
        break;
      }
      left -= in_piece;
      ++next_;
      next_offset_ = 0;
    }
  }
  clear();
  return Write::kAll;
}

void RespCommandQueue::clear() {
  copied_.clear();
  pieces_.clear();
  next_ = next_offset_ = bytes_ = 0;
}

}  // namespace pagedkv::remote
