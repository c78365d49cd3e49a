// RouterServer: the HTTP front of pagedkv router. It speaks the same API as pagedkv serve and
// passes each request through to one backend, chosen by the routing policy.
//
//   /v1/completions, /v1/chat/completions   routed: the prompt is tokenized and hashed block by
//                                           block exactly as the backends do, each backend scored
//                                           (routing_policy.h), the request forwarded, the answer
//                                           (whole, or streamed as it arrives) relayed.
//   /v1/models, /version, /tokenize, /detokenize   forwarded to any healthy backend.
//   /reset_prefix_cache                     forwarded to every backend.
//   /health                                 200 while at least one backend is healthy, else 503.
//   /metrics                                the router's own metrics (router_metrics.h).
//   /router/state                           backends, health, index sizes, event positions (JSON).
//   /router/backends                        membership: GET lists, POST {"url"} adds, DELETE removes
//                                           (admin key only; backends_file.h watches a file too).
//
// Failure handling: a backend that refuses the connection is taken out of the rotation and the
// request goes to the next choice (nothing reached the refusing backend, so nothing is done
// twice); a backend that answers 503 (overloaded, draining) is skipped the same way while others
// remain. A backend that closes the connection without a byte of answer is taken out too and
// the request goes to the next choice, once per request (the work may have started there, but
// completions have no side effects; once, so a request that crashes backends takes down at most
// two). A backend that fails after the answer began fails that request: 502 if nothing was
// relayed yet, else the stream ends with an error event. A client that goes away has its backend
// connection closed, which cancels the engine request there. When every healthy backend is
// saturated (answers 503), the request waits in a bounded queue in the router and is tried again
// as room appears; a full queue or a long wait is a 429 with Retry-After, which OpenAI clients
// retry after the pause.
//
// Every routed answer carries X-Request-Id (the client's, when valid, else one the router makes;
// the backend gets it too and names its response with it: api/request_id.h) and
// X-Pagedkv-Backend, the instance that answered. Requests of one session (X-Session-Id header,
// else the body's `user`) prefer the instance their session last used when costs tie.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagedkv/api/openai_request.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"
#include "pagedkv/router/backend_pool.h"
#include "pagedkv/router/connection_pool.h"
#include "pagedkv/router/router_metrics.h"
#include "pagedkv/router/routing_policy.h"
#include "pagedkv/router/stream_migration.h"
#include "pagedkv/router/upstream_call.h"

namespace pagedkv::api {
class DisconnectCheck;
}

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace pagedkv::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (bind() returns it)
  std::string api_key;  // clients must send it (as pagedkv serve's --api-key)
  std::string admin_api_key;  // for /router/backends (empty: api_key; both empty: off)
  int http_threads = 256;  // each open stream holds one
  int listen_backlog = 1024;
  size_t max_body_bytes = 8u << 20;
  UpstreamOptions upstream;
  api::RequestLimits limits;
  // When every healthy backend answers 503 (overloaded or draining), a request waits in the
  // router, trying again as they free up, for up to queue_timeout; at most max_queued wait at
  // once. Beyond either: 429 with Retry-After.
  int max_queued = 256;
  std::chrono::milliseconds queue_timeout{30'000};
  bool reuse_connections = true;  // kept-alive connections to the backends (connection_pool.h)
  // How many times a streamed answer may move to another instance when its own dies mid-stream
  // (stream_migration.h); 0: it ends with an error event.
  int migration_limit = 0;
};

// What the router knows of the served model: enough to tokenize prompts as the backends do.
struct RoutedModel {
  const TextTokenizer* tokenizer = nullptr;  // null: text prompts are routed by load alone
  int vocab_size = 0;
  int max_model_len = 0;
};

// What routing one request decided (exposed for tests and the benchmark's logs).
struct RoutingPlan {
  std::vector<BlockHash> hashes;  // of the first prompt's full blocks (empty: not tokenized)
  int prompt_blocks = 0;
  int64_t load_blocks = 0;  // KV blocks the request will hold at most
};

class RouterServer {
 public:
  RouterServer(RouterOptions options, BackendPool& pool, BackendChooser chooser, RoutedModel model,
               RouterMetrics& metrics);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  int bind();  // returns the bound port; throws Error
  void serve();  // until stop()
  void stop();
  int open_streams() const { return open_streams_.load(); }
  int queued() const { return queued_.load(); }
  const ConnectionPool& connections() const { return connections_; }

  // Tokenizes and hashes one request body for `endpoint` (never throws: a request the router
  // cannot read is routed by load; its backend answers the error).
  RoutingPlan plan(const std::string& body, api::ApiEndpoint endpoint) const;

 private:
  struct Placement;
  struct RelayedStream;
  void install_routes();
  // Moves a stream whose instance died to another one (up to migration_limit times); false: it
  // cannot go on (the caller ends it with an error event).
  bool continue_elsewhere(RelayedStream& relay, const std::string& request_id, api::DisconnectCheck& watch);
  void check_admin_key(const httplib::Request& req) const;  // throws ApiError 401/403
  static BackendAddress admin_backend_address(const httplib::Request& req);
  // Picks a backend not in `excluded`: its index, or -1. `session_backend` breaks ties (-1: none).
  int choose(const RoutingPlan& plan, const std::vector<bool>& excluded, PrefixOverlap& overlap, int session_backend);
  // Session affinity: where each recent session's last request went.
  int session_backend(const std::string& session) const;
  void remember_session(const std::string& session, int backend);
  static constexpr size_t kMaxSessions = 65536;

  RouterOptions options_;
  BackendPool& pool_;
  std::mutex chooser_mutex_;
  BackendChooser chooser_;
  RoutedModel model_;
  RouterMetrics& metrics_;
  std::unique_ptr<httplib::Server> http_;
  ConnectionPool connections_;
  std::atomic<int> open_streams_{0};
  std::atomic<int> queued_{0};  // requests waiting for a backend with room
  std::atomic<uint64_t> turn_{0};  // which healthy backend answers the simple forwarded routes
  std::atomic<uint64_t> request_ids_{0};
  const uint64_t id_salt_;  // makes ids of different routers (and restarts) differ
  mutable std::mutex sessions_mutex_;
  std::unordered_map<std::string, int> sessions_;
  std::deque<std::string> session_order_;  // insertion order, for forgetting the oldest
};

}  // namespace pagedkv::router
