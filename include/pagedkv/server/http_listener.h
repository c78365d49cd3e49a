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
#include <string>

#include "pagedkv/core/error.h"

namespace pagedkv::server {

class HttpListener : public httplib::Server {
 public:
  // Binds host:port (0: any free port) with a listen backlog of `backlog`; returns the bound
  // port. Throws Error if it cannot.
  int bind_with_backlog(const std::string& host, int port, int backlog) {
    int bound = port;
    if (port == 0) bound = bind_to_any_port(host);
    else if (!bind_to_port(host, port)) bound = -1;
    if (bound <= 0) throw Error(fmt::format("cannot listen on {}:{} (address in use or not available)", host, port));
    if (::listen(svr_sock_, backlog) != 0)
      throw Error(fmt::format("cannot raise the listen backlog to {}: {}", backlog, std::strerror(errno)));
    return bound;
  }
};

}  // namespace pagedkv::server
