// HttpListener: cpp-httplib's server with a listen backlog that survives bursts.
//
// Debian's cpp-httplib (0.11) listens with a backlog of 5 connections, compiled into the library:
// a burst of clients (a benchmark at an infinite request rate, a reconnect storm) overflows it and
// connections are reset. Linux lets a listening socket's backlog be raised by listening again.
// Used by pagedkv serve and pagedkv router (both link cpp-httplib; this header is not installed).
#pragma once

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "pagedkv/core/error.h"

namespace pagedkv::server {

class HttpListener : public httplib::Server {
 public:
  // Call after binding.
  void widen_listen_backlog(int backlog) {
    if (::listen(svr_sock_, backlog) != 0)
      throw Error(fmt::format("cannot raise the listen backlog to {}: {}", backlog, std::strerror(errno)));
  }
};

}  // namespace pagedkv::server
