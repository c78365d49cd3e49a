// Whether the client of an HTTP request is still there.
//
// cpp-httplib (0.11, Debian 12) gives a handler the connection's addresses but not its socket,
// and a blocked handler only learns of a disconnect when a write fails. To abort the engine
// request of a client that went away while it waited (non-streaming, or between stream chunks),
// the server finds the connected socket by its two endpoints once (the socket of a live request
// stays open until its handler returns) and then polls it: a peer that closed its end reads as
// end-of-file or a hang-up.
#pragma once

#include <chrono>
#include <string>

namespace pagedkv::api {

// Whether poll()'s `revents` for connected socket `fd` (asked for POLLIN | POLLRDHUP) show that
// the peer closed or reset it. Never blocks; leaves pending request bytes unread.
bool peer_closed(int fd, short revents);

class PeerConnection {
 public:
  PeerConnection() = default;
  // The socket of this process whose local port is `local_port` and whose peer is
  // `remote_addr`:`remote_port`; an unknown connection (closed() is then always false) if none.
  // The next request of the same keep-alive connection on the same thread (httplib's way) finds
  // it again in two system calls; any other lookup scans the process's descriptors, one system
  // call for each that is not the one.
  static PeerConnection find(int local_port, const std::string& remote_addr, int remote_port);

  bool known() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // The peer closed or reset the connection. Never blocks; leaves pending request bytes unread.
  bool closed() const;

 private:
  explicit PeerConnection(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Polls a PeerConnection at most once per `interval`, however often the caller asks (a waiting
// handler asks on every wake-up).
class DisconnectCheck {
 public:
  DisconnectCheck(PeerConnection peer, std::chrono::milliseconds interval) : peer_(peer), interval_(interval) {}
  bool client_gone() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return false;
    next_ = now + interval_;
    return peer_.closed();
  }

 private:
  PeerConnection peer_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace pagedkv::api
