// HttpListener: cpp-httplib's server with a listen backlog that survives bursts, OpenAI-shaped
// errors and the bearer-key check: what pagedkv serve and pagedkv router share.
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
#include <functional>
#include <string>

#include "pagedkv/api/api_error.h"
#include "pagedkv/core/error.h"

namespace pagedkv::api {

// OpenAI's error object as the response, with Retry-After on 503. Invalid UTF-8 in a message (a
// piece of the client's input) is replaced, never thrown on.
inline void send_api_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  res.status = e.status();
  res.set_content(e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

class HttpListener : public httplib::Server {
 public:
  // Errors httplib raises itself (no route, body too large, malformed HTTP) and exceptions thrown
  // by handlers (ApiError: its status; anything else: 500) get OpenAI's shape. `program` names
  // whose --max-body-bytes a 413 points to.
  void use_api_errors(std::string program) {
    set_error_handler([program](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message =
          res.status == 404   ? fmt::format("no route for {} {}", req.method, req.path)
          : res.status == 413 ? fmt::format("the request body is larger than the {}'s --max-body-bytes", program)
                              : fmt::format("HTTP {}", res.status);
      const char* code = res.status == 404 ? "not_found" : res.status == 413 ? "payload_too_large" : "http_error";
      send_api_error(res, ApiError(res.status, message, "", code));
    });
    set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      try {
        std::rethrow_exception(ep);
      } catch (const ApiError& e) {
        send_api_error(res, e);
      } catch (const std::exception& e) {
        send_api_error(res, ApiError(500, fmt::format("internal error: {}", e.what()), "", "internal_error"));
      } catch (...) {
        send_api_error(res, ApiError(500, "internal error", "", "internal_error"));
      }
    });
  }

  // With a non-empty `key`, every route for which `needs_key(path)` holds answers 401 unless the
  // request sends "Authorization: Bearer <key>".
  void require_api_key(std::string key, std::function<bool(const std::string&)> needs_key) {
    if (key.empty()) return;
    set_pre_routing_handler([key = std::move(key), needs_key = std::move(needs_key)](const httplib::Request& req,
                                                                                     httplib::Response& res) {
      if (!needs_key(req.path) || req.get_header_value("Authorization") == "Bearer " + key) return HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      send_api_error(res, ApiError(401, "a valid API key is required: send 'Authorization: Bearer <key>'", "", "invalid_api_key"));
      return HandlerResponse::Handled;
    });
  }

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

}  // namespace pagedkv::api
