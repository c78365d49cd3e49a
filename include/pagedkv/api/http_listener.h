// HttpListener: cpp-httplib's server with a listen backlog that survives bursts, OpenAI-shaped
// errors, the bearer-key check and CORS: what pagedkv serve and pagedkv router share.
//
// Debian's cpp-httplib (0.11) listens with a backlog of 5 connections, compiled into the library:
// a burst of clients (a benchmark at an infinite request rate, a reconnect storm) overflows it and
// connections are reset. Linux lets a listening socket's backlog be raised by listening again.
// Used by pagedkv serve and pagedkv router (both link cpp-httplib; this header is not installed).
#pragma once

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "pagedkv/api/api_error.h"
#include "pagedkv/core/error.h"

namespace pagedkv::api {

// OpenAI's error object as the response, with Retry-After on 503 and 429. Invalid UTF-8 in a message (a
// piece of the client's input) is replaced, never thrown on.
inline void send_api_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503 || e.status() == 429) res.set_header("Retry-After", "1");
  res.status = e.status();
  res.set_content(e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

// Whether `sent` equals the secret `key`, in a time that depends on the key's length only, so
// that timing a refused request tells nothing about the key.
inline bool constant_time_equal(const std::string& sent, const std::string& key) {
  unsigned char diff = sent.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(key[i] ^ (i < sent.size() ? sent[i] : 0));
  return diff == 0;
}

class HttpListener : public httplib::Server {
 public:
  HttpListener() {
    // cpp-httplib's default socket options set SO_REUSEPORT, with which a second server binds the
    // same port and the kernel splits connections between the two: a port in use must fail at
    // start. SO_REUSEADDR alone still lets a restart bind while old connections sit in TIME_WAIT.
    set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    // Its default also closes a keep-alive connection after 5 requests, which makes pooling
    // clients reconnect; a connection lives until it idles past the keep-alive timeout.
    set_keep_alive_max_count(std::numeric_limits<size_t>::max());
  }

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
    require_api_key(std::vector<std::string>{std::move(key)}, std::move(needs_key));
  }
  // The same with several keys, any of which is accepted (none: no check; empty keys are ignored).
  void require_api_key(std::vector<std::string> keys, std::function<bool(const std::string&)> needs_key) {
    std::erase_if(keys, [](const std::string& k) { return k.empty(); });
    if (keys.empty()) return;
    for (std::string& k : keys) k.insert(0, "Bearer ");
    add_pre_routing([keys = std::move(keys), needs_key = std::move(needs_key)](const httplib::Request& req,
                                                                               httplib::Response& res) {
      if (!needs_key(req.path)) return HandlerResponse::Unhandled;
      const std::string sent = req.get_header_value("Authorization");
      // Every key is compared in full, whatever matched, so the time taken tells nothing about them.
      bool match = false;
      for (const std::string& k : keys) match |= constant_time_equal(sent, k);
      if (match) return HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      send_api_error(
          res, ApiError(401, "a valid API key is required: send 'Authorization: Bearer <key>'", "", "invalid_api_key"));
      return HandlerResponse::Handled;
    });
  }

  // CORS for browsers on other origins: with `origins` non-empty ("*": any), a request whose
  // Origin is allowed gets Access-Control-Allow-Origin (and Vary: Origin) on its answer, and a
  // preflight (OPTIONS with Access-Control-Request-Method) is answered 204 with the methods and
  // headers allowed, before any key check (browsers send no credentials on a preflight). Others
  // get no CORS headers, which browsers read as a refusal. Call before require_api_key.
  void allow_origins(std::vector<std::string> origins) {
    if (origins.empty()) return;
    add_pre_routing([origins = std::move(origins)](const httplib::Request& req, httplib::Response& res) {
      const std::string origin = req.get_header_value("Origin");
      if (origin.empty()) return HandlerResponse::Unhandled;
      const bool any = std::find(origins.begin(), origins.end(), "*") != origins.end();
      if (!any && std::find(origins.begin(), origins.end(), origin) == origins.end()) return HandlerResponse::Unhandled;
      res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
      if (!any) res.set_header("Vary", "Origin");
      if (req.method != "OPTIONS" || !req.has_header("Access-Control-Request-Method"))
        return HandlerResponse::Unhandled;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
      res.set_header("Access-Control-Max-Age", "600");
      res.status = 204;
      return HandlerResponse::Handled;
    });
  }

  // A POST route whose request may come without a body and without Content-Length (`curl -X
  // POST URL`, as vLLM documents /reset_prefix_cache): cpp-httplib would answer such a POST 400
  // before routing, so it is answered from the pre-routing step. Call after require_api_key, so
  // the key is checked first. A POST that does say its length goes through the route as usual.
  void post_without_body(std::string path, std::function<void(const httplib::Request&, httplib::Response&)> handler) {
    add_pre_routing(
        [path = std::move(path), handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
          if (req.method != "POST" || req.path != path || req.has_header("Content-Length") ||
              req.has_header("Transfer-Encoding"))
            return HandlerResponse::Unhandled;
          try {
            handler(req, res);
          } catch (const ApiError& e) {
            send_api_error(res, e);
          } catch (const std::exception& e) {
            send_api_error(res, ApiError(500, fmt::format("internal error: {}", e.what()), "", "internal_error"));
          }
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

  // Serves on the bound socket until stop_serving(). httplib's own stop() does nothing before its
  // listener runs, so a stop that comes first (a signal right after start-up) would leave the
  // listener accepting for ever: a stop asked for before serving starts makes it return at once,
  // and one asked for meanwhile is repeated until the listener has taken it.
  void serve_until_stopped() {
    serving_ = true;
    if (!stop_requested_) listen_after_bind();
    serving_ = false;
  }
  void stop_serving() {
    stop_requested_ = true;
    while (serving_) {
      stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  std::atomic<bool> serving_{false}, stop_requested_{false};
  // cpp-httplib keeps one pre-routing handler: the steps run in the order they were added, the
  // first that answers ends the chain.
  using PreRouting = std::function<HandlerResponse(const httplib::Request&, httplib::Response&)>;
  void add_pre_routing(PreRouting step) {
    pre_routing_.push_back(std::move(step));
    if (pre_routing_.size() == 1)
      set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        for (const PreRouting& s : pre_routing_)
          if (s(req, res) == HandlerResponse::Handled) return HandlerResponse::Handled;
        return HandlerResponse::Unhandled;
      });
  }
  std::vector<PreRouting> pre_routing_;
};

}  // namespace pagedkv::api
