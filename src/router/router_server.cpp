#include "pagedkv/router/router_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <climits>
#include <random>
#include <thread>

#include "pagedkv/api/api_error.h"
#include "pagedkv/api/http_listener.h"
#include "pagedkv/api/json_text.h"
#include "pagedkv/api/kv_events_wire.h"
#include "pagedkv/api/peer_connection.h"
#include "pagedkv/api/request_id.h"
#include "pagedkv/core/error.h"
#include "pagedkv/prefix/block_hasher.h"

namespace pagedkv::router {
namespace {

using api::ApiEndpoint;
using api::ApiError;
using api::kMaxJsonDepth;
using api::nests_deeper_than;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kPollInterval = 20ms;  // how often a waiting handler checks that its client is still there
constexpr auto kQueueRetryInterval = 100ms;  // how often a queued request tries the saturated backends again

// Holds a place in the router's queue while a request waits for a backend with room.
struct QueuePlace {
  std::atomic<int>& queued;
  ~QueuePlace() { --queued; }
};

// /health is open; the membership endpoints check the admin key themselves.
constexpr const char* kBackendsPath = "/router/backends";
bool needs_api_key(const std::string& path) { return path != "/health" && path != kBackendsPath; }

// The header that names the instance an answer came from (clients and tests see where it went).
constexpr const char* kBackendHeader = "X-Pagedkv-Backend";

// The request's session, for affinity: the X-Session-Id header, else the body's `user` field
// (OpenAI's end-user id). Empty: none. The body is parsed again only when the header is absent.
std::string session_key(const httplib::Request& req) {
  if (std::string header = req.get_header_value("X-Session-Id"); !header.empty()) return "h:" + header.substr(0, 256);
  if (req.body.find("\"user\"") == std::string::npos || nests_deeper_than(req.body, kMaxJsonDepth)) return {};
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return {};
  const auto user = body.find("user");
  return user != body.end() && user->is_string() && !user->get_ref<const std::string&>().empty()
             ? "u:" + user->get_ref<const std::string&>().substr(0, 256)
             : std::string();
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One plain request to a backend (GET, or POST of a JSON body) with the router's upstream
// timeouts and key: the routes that are not completions.
httplib::Result backend_request(const BackendAddress& backend, const UpstreamOptions& options,
                                const std::string& method, const std::string& path, const std::string& body) {
  httplib::Client client(backend.host, backend.port);
  client.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.connect_timeout));
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.read_timeout));
  httplib::Headers headers;
  if (!options.api_key.empty()) headers.emplace("Authorization", "Bearer " + options.api_key);
  return method == "GET" ? client.Get(path, headers) : client.Post(path, headers, body, "application/json");
}

}  // namespace

// Holds a backend's load for one request until the answer is relayed (or fails).
struct RouterServer::Placement {
  BackendPool& pool;
  int backend;
  int64_t blocks;
  bool failed = false;
  ~Placement() { pool.finished(backend, blocks, failed); }
};

// A streamed answer being relayed: the instance producing it now, and what moves it elsewhere.
struct RouterServer::RelayedStream {
  std::shared_ptr<UpstreamCall> call;
  std::shared_ptr<Placement> placement;
  std::shared_ptr<StreamMigration> migration;  // null: the stream cannot move
  RoutingPlan routing;
  std::vector<bool> excluded;  // instances that failed this request
  std::string path;  // the client's endpoint
};

bool RouterServer::continue_elsewhere(RelayedStream& relay, const std::string& request_id,
                                      api::DisconnectCheck& watch) {
  StreamMigration& m = *relay.migration;
  const int dead = relay.placement->backend;
  const bool restart = m.nothing_relayed();  // no chunk yet: the request itself goes elsewhere
  if (!(restart || m.can_continue()) || m.migrations() >= options_.migration_limit) {
    metrics_.migration(restart || m.can_continue() ? "limit" : "not_continuable");
    return false;
  }
  relay.placement->failed = true;
  metrics_.failed(dead, "upstream_error");
  pool_.mark_down(dead, fmt::format("failed mid-stream: {}", relay.call->error()));
  if (static_cast<size_t>(dead) < relay.excluded.size()) relay.excluded[static_cast<size_t>(dead)] = true;
  const std::string body = restart ? m.restart_elsewhere() : m.continue_elsewhere();
  const std::string path = restart ? relay.path : "/v1/completions";
  for (;;) {
    relay.excluded.resize(static_cast<size_t>(pool_.size()), false);
    PrefixOverlap overlap;
    const int backend = choose(relay.routing, relay.excluded, overlap, -1);
    if (backend < 0) {
      metrics_.migration("no_backend");
      return false;
    }
    pool_.dispatched(backend, relay.routing.load_blocks);
    auto placement = std::shared_ptr<Placement>(new Placement{pool_, backend, relay.routing.load_blocks});
    auto call = std::make_shared<UpstreamCall>(pool_.address(backend), path, body, options_.upstream, request_id,
                                               options_.reuse_connections ? &connections_ : nullptr);
    UpstreamCall::State state;
    while ((state = call->wait_headers(kPollInterval)) == UpstreamCall::State::kWaiting)
      if (watch.client_gone()) {
        call->cancel();
        placement->failed = true;
        return false;
      }
    if (state != UpstreamCall::State::kFailed && call->status() == 200 &&
        call->content_type().rfind("text/event-stream", 0) == 0) {
      fmt::print(stderr, "router: request {} continues on {} after {} tokens ({} of {} migrations)\n", request_id,
                 pool_.address(backend).url, m.generated_tokens(), m.migrations(), options_.migration_limit);
      metrics_.migration(restart ? "restarted" : "continued");
      relay.call = std::move(call);
      relay.placement = std::move(placement);
      return true;
    }
    placement->failed = true;
    relay.excluded[static_cast<size_t>(backend)] = true;  // refused, busy or failing: the next one
    if (state == UpstreamCall::State::kFailed) pool_.mark_down(backend, fmt::format("continuation: {}", call->error()));
  }
}

RouterServer::RouterServer(RouterOptions options, BackendPool& pool, BackendChooser chooser, RoutedModel model,
                           RouterMetrics& metrics)
    : options_(std::move(options)),
      pool_(pool),
      chooser_(std::move(chooser)),
      model_(model),
      metrics_(metrics),
      http_(std::make_unique<api::HttpListener>()),
      id_salt_([] {
        std::random_device rd;
        return (uint64_t{rd()} << 32) | rd();
      }()) {
  const size_t threads = static_cast<size_t>(std::max(2, options_.http_threads));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_tcp_nodelay(true);
  install_routes();
}

RouterServer::~RouterServer() = default;

int RouterServer::bind() {
  return static_cast<api::HttpListener&>(*http_).bind_with_backlog(options_.host, options_.port,
                                                                   options_.listen_backlog);
}

void RouterServer::serve() { static_cast<api::HttpListener&>(*http_).serve_until_stopped(); }

void RouterServer::stop() { static_cast<api::HttpListener&>(*http_).stop_serving(); }

RoutingPlan RouterServer::plan(const std::string& body, ApiEndpoint endpoint) const {
  RoutingPlan p;
  const std::optional<PrefixHashing> hashing = pool_.hashing();
  // Blocks of the routing group (its block may span several hash blocks: see PrefixHashing).
  const int block_size = hashing ? hashing->routing_block_size() : 16;
  try {
    const api::CompletionRequest request = api::parse_completion_request(body, endpoint, options_.limits);
    if (!model_.tokenizer) {
      // Token-id prompts need no tokenizer; text prompts are then routed by load.
      bool all_ids = endpoint == ApiEndpoint::kCompletions;
      for (const api::PromptInput& in : request.prompts) all_ids = all_ids && !in.is_text;
      if (!all_ids) return p;
    }
    api::ModelLimits limits{request.model, model_.max_model_len > 0 ? model_.max_model_len : INT_MAX / 2,
                            model_.vocab_size > 0 ? model_.vocab_size : INT_MAX};
    std::vector<api::PreparedPrompt> prompts;
    if (model_.tokenizer) {
      prompts = api::prepare_request(request, *model_.tokenizer, limits);
    } else {
      for (const api::PromptInput& in : request.prompts)
        prompts.push_back({in.token_ids, request.max_tokens.value_or(16)});
    }
    for (const api::PreparedPrompt& prompt : prompts) {
      const int64_t tokens = static_cast<int64_t>(prompt.token_ids.size()) + prompt.max_tokens;
      p.load_blocks += request.n * ((tokens + block_size - 1) / block_size);
    }
    if (prompts.empty()) return p;
    const std::vector<TokenId>& first = prompts.front().token_ids;
    p.prompt_blocks =
        static_cast<int>((first.size() + static_cast<size_t>(block_size) - 1) / static_cast<size_t>(block_size));
    if (hashing) {
      const auto algorithm = parse_hash_algorithm(hashing->algorithm);
      if (algorithm) {
        BlockHasher hasher(hashing->block_size, *algorithm, hashing->seed);
        std::vector<uint64_t> digests;
        hasher.extend(first, PrefixKeys{0, {}, request.cache_salt}, p.hashes, digests);
        // A routing-group block of k hash blocks is named by the last one's chained hash.
        const size_t k = static_cast<size_t>(block_size / hashing->block_size);
        if (k > 1) {
          size_t kept = 0;
          for (size_t h = k - 1; h < p.hashes.size(); h += k) p.hashes[kept++] = p.hashes[h];
          p.hashes.resize(kept);
        }
      }
    }
  } catch (const std::exception&) {
    // Malformed or too long: the backend will say why. Route it by load.
  }
  return p;
}

int RouterServer::choose(const RoutingPlan& plan, const std::vector<bool>& excluded, PrefixOverlap& overlap,
                         int session_backend) {
  std::vector<BackendView> views = pool_.views(plan.hashes);
  for (size_t i = 0; i < views.size() && i < excluded.size(); ++i)  // a backend added meanwhile: not excluded
    if (excluded[i]) views[i].healthy = false;
  int chosen;
  {
    std::lock_guard lock(chooser_mutex_);
    chosen = chooser_.choose(views, plan.prompt_blocks, session_backend);
  }
  if (chosen >= 0) overlap = views[static_cast<size_t>(chosen)].overlap;
  return chosen;
}

void RouterServer::check_admin_key(const httplib::Request& req) const {
  const std::string& key = options_.admin_api_key.empty() ? options_.api_key : options_.admin_api_key;
  if (key.empty())
    throw ApiError(403, "the membership endpoints are off: start the router with --admin-api-key (or --api-key)", "",
                   "admin_disabled");
  if (!api::constant_time_equal(req.get_header_value("Authorization"), "Bearer " + key))
    throw ApiError(401, "the membership endpoints need the admin key: send 'Authorization: Bearer <key>'", "",
                   "invalid_api_key");
}

BackendAddress RouterServer::admin_backend_address(const httplib::Request& req) {
  std::string url = req.get_param_value("url");
  if (url.empty()) {
    const json body = nests_deeper_than(req.body, kMaxJsonDepth)
                          ? json(json::value_t::discarded)
                          : json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object() || !body.contains("url") || !body["url"].is_string())
      throw ApiError(400, "expected a JSON body {\"url\": \"http://host:port\"} (or ?url=)", "url",
                     "invalid_request_error");
    url = body["url"].get<std::string>();
  }
  try {
    return BackendAddress::parse(url);
  } catch (const ConfigError& e) {
    throw ApiError(400, e.what(), "url", "invalid_request_error");
  }
}

int RouterServer::session_backend(const std::string& session) const {
  if (session.empty()) return -1;
  std::lock_guard lock(sessions_mutex_);
  const auto it = sessions_.find(session);
  return it == sessions_.end() ? -1 : it->second;
}

void RouterServer::remember_session(const std::string& session, int backend) {
  if (session.empty()) return;
  std::lock_guard lock(sessions_mutex_);
  const auto [it, inserted] = sessions_.insert_or_assign(session, backend);
  if (!inserted) return;
  session_order_.push_back(session);
  if (session_order_.size() > kMaxSessions) {  // forget the oldest session first
    sessions_.erase(session_order_.front());
    session_order_.pop_front();
  }
}

void RouterServer::install_routes() {
  httplib::Server& http = *http_;

  auto& listener = static_cast<api::HttpListener&>(http);
  listener.use_api_errors("router");
  listener.require_api_key(options_.api_key, needs_api_key);

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    int healthy = 0;
    for (const BackendState& s : pool_.states()) healthy += s.healthy;
    if (healthy == 0) api::send_api_error(res, ApiError(503, "no backend is healthy", "", "no_backend"));
    else res.set_content(json{{"healthy_backends", healthy}}.dump(), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/router/state", [this](const httplib::Request&, httplib::Response& res) {
    json backends = json::array();
    for (const BackendState& s : pool_.states()) {
      json index = json::object();
      for (int m = 0; m < kNumMedia; ++m) index[std::string(medium_name(static_cast<Medium>(m)))] = s.index_blocks[m];
      backends.push_back({{"url", s.address.url},
                          {"removed", s.removed},
                          {"healthy", s.healthy},
                          {"reachable", s.reachable},
                          {"last_error", s.last_error},
                          {"epoch", fmt::format("{:016x}", s.epoch)},
                          {"last_seq", s.last_seq},
                          {"hashing", s.hashing ? json{{"block_size", s.hashing->block_size},
                                                       {"hash_algorithm", s.hashing->algorithm},
                                                       {"hash_seed", s.hashing->seed}}
                                                : json(nullptr)},
                          {"hashing_mismatch", s.hashing_mismatch},
                          {"in_flight", s.in_flight},
                          {"load_blocks", s.load_blocks},
                          {"reported_load", s.reported ? api::format_instance_load(*s.reported) : json(nullptr)},
                          {"routed", s.routed},
                          {"failed", s.failed},
                          {"snapshots", s.snapshots},
                          {"events", s.events},
                          {"poll_errors", s.poll_errors},
                          {"went_down", s.went_down},
                          {"index_blocks", std::move(index)}});
    }
    const RoutingWeights& w = chooser_.weights();
    res.set_content(json{{"policy", routing_policy_name(chooser_.policy())},
                         {"queued", queued_.load()},
                         {"connections", {{"idle", connections_.idle()}, {"reused", connections_.reused()}}},
                         {"weights",
                          {{"prefill_scale", w.prefill_scale},
                           {"device_credit", w.device_credit},
                           {"host_credit", w.host_credit},
                           {"disk_credit", w.disk_credit}}},
                         {"backends", std::move(backends)}}
                        .dump(),
                    "application/json");
  });

  // Membership: GET lists the backends, POST {"url": ...} adds one, DELETE {"url": ...} (or
  // ?url=...) removes one. Only with the admin key (RouterOptions::admin_api_key).
  http.Get(kBackendsPath, [this](const httplib::Request& req, httplib::Response& res) {
    check_admin_key(req);
    json list = json::array();
    for (const BackendState& s : pool_.states())
      list.push_back({{"url", s.address.url}, {"removed", s.removed}, {"healthy", s.healthy}});
    res.set_content(json{{"backends", std::move(list)}}.dump(), "application/json");
  });
  http.Post(kBackendsPath, [this](const httplib::Request& req, httplib::Response& res) {
    check_admin_key(req);
    const BackendAddress address = admin_backend_address(req);
    const BackendPool::Added added = pool_.add(address);
    fmt::print(stderr, "router: backend {} {} by the admin endpoint\n", address.url,
               added == BackendPool::Added::kPresent ? "was already present (add)" : "added");
    res.status = added == BackendPool::Added::kPresent ? 200 : 201;
    res.set_content(json{{"url", address.url},
                         {"status", added == BackendPool::Added::kAdded      ? "added"
                                    : added == BackendPool::Added::kRestored ? "restored"
                                                                             : "present"}}
                        .dump(),
                    "application/json");
  });
  http.Delete(kBackendsPath, [this](const httplib::Request& req, httplib::Response& res) {
    check_admin_key(req);
    const BackendAddress address = admin_backend_address(req);
    if (!pool_.remove(address.url))
      throw ApiError(404, fmt::format("no backend {} in the pool", address.url), "url", "backend_not_found");
    fmt::print(stderr, "router: backend {} removed by the admin endpoint\n", address.url);
    res.set_content(json{{"url", address.url}, {"status", "removed"}}.dump(), "application/json");
  });

  // The routes whose answer does not depend on the backend: any healthy one, in turn.
  auto forward_simple = [this](const httplib::Request& req, httplib::Response& res) {
    const std::vector<BackendState> states = pool_.states();
    const size_t n = states.size();
    const uint64_t start = turn_++;
    for (size_t k = 0; k < n; ++k) {
      const BackendState& s = states[(start + k) % n];
      if (!s.healthy) continue;
      httplib::Result r = backend_request(s.address, options_.upstream, req.method, req.path, req.body);
      if (!r) continue;  // try the next
      res.status = r->status;
      res.set_content(r->body, r->get_header_value("Content-Type", 0).empty()
                                   ? "application/json"
                                   : r->get_header_value("Content-Type").c_str());
      return;
    }
    api::send_api_error(res, ApiError(503, "no backend is healthy", "", "no_backend"));
  };
  http.Get("/v1/models", forward_simple);
  http.Get("/version", forward_simple);
  http.Post("/tokenize", forward_simple);
  http.Post("/detokenize", forward_simple);

  http.Post("/reset_prefix_cache", [this](const httplib::Request&, httplib::Response& res) {
    json results = json::array();
    bool all_ok = true;
    for (const BackendState& s : pool_.states()) {
      if (s.removed) continue;
      const BackendAddress& a = s.address;
      httplib::Result r = backend_request(a, options_.upstream, "POST", "/reset_prefix_cache", "");
      json entry = {{"backend", a.url}};
      if (!r) {
        entry["error"] = httplib::to_string(r.error());
        all_ok = false;
      } else {
        entry["status"] = r->status;
        entry["response"] = json::parse(r->body, nullptr, false);
        all_ok = all_ok && r->status == 200;
      }
      results.push_back(std::move(entry));
    }
    res.status = all_ok ? 200 : 502;
    res.set_content(json{{"backends", std::move(results)}}.dump(), "application/json");
  });

  auto completion = [this](ApiEndpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      const auto received = Clock::now();
      const RoutingPlan routing = plan(req.body, endpoint);
      const std::string client_id = req.get_header_value(api::kRequestIdHeader);
      const std::string request_id = api::is_valid_request_id(client_id)
                                         ? client_id
                                         : fmt::format("router-{:016x}", request_ids_.fetch_add(1) ^ id_salt_);
      res.set_header(api::kRequestIdHeader, request_id);
      const std::string session = session_key(req);
      const int previous_backend = session_backend(session);
      auto watch = std::make_shared<api::DisconnectCheck>(
          api::PeerConnection::find(req.local_port, req.remote_addr, req.remote_port), kPollInterval);
      // A streamed answer that may move to another instance if its own dies (stream_migration.h).
      std::shared_ptr<StreamMigration> migration;
      if (options_.migration_limit > 0) {
        std::string why;
        migration = StreamMigration::begin(req.body, endpoint, why);
      }
      const std::string& upstream_body = migration ? migration->upstream_body() : req.body;
      std::vector<bool> excluded(static_cast<size_t>(pool_.size()), false);
      std::shared_ptr<UpstreamCall> call;
      std::shared_ptr<Placement> placement;
      bool retried_unanswered = false;
      std::unique_ptr<QueuePlace> queue_place;
      Clock::time_point queued_since;
      for (;;) {
        PrefixOverlap overlap;
        const int backend = choose(routing, excluded, overlap, previous_backend);
        if (backend < 0) {
          metrics_.no_backend();
          throw ApiError(503, "no backend is healthy", "", "no_backend");
        }
        metrics_.routed(backend, overlap, routing.prompt_blocks,
                        std::chrono::duration<double>(Clock::now() - received).count());
        pool_.dispatched(backend, routing.load_blocks);
        placement.reset(new Placement{pool_, backend, routing.load_blocks});
        call = std::make_shared<UpstreamCall>(pool_.address(backend), req.path, upstream_body, options_.upstream,
                                              request_id, options_.reuse_connections ? &connections_ : nullptr);
        UpstreamCall::State state;
        while ((state = call->wait_headers(kPollInterval)) == UpstreamCall::State::kWaiting) {
          if (watch->client_gone()) {
            call->cancel();
            placement->failed = true;
            metrics_.failed(backend, "client_gone");
            res.status = 499;  // never sent
            return;
          }
        }
        if (state == UpstreamCall::State::kFailed) {
          placement->failed = true;
          // Nothing reached it (refused), or it closed the connection without a byte of answer (a
          // backend shutting down with this connection in its backlog): the next choice gets the
          // request. An unanswered one only once, so a request that crashes backends cannot take
          // down more than two.
          const bool refused = call->never_connected();
          if (refused || (call->unanswered() && !retried_unanswered)) {
            metrics_.failed(backend, refused ? "connect" : "unanswered");
            pool_.mark_down(
                backend, fmt::format("POST {}: {}{}", req.path, refused ? "" : "closed unanswered: ", call->error()));
            excluded[static_cast<size_t>(backend)] = true;
            retried_unanswered = retried_unanswered || !refused;
            continue;
          }
          metrics_.failed(backend, "upstream_error");
          fmt::print(stderr, "router: request {} to {} failed: {}\n", request_id, pool_.address(backend).url,
                     call->error());
          throw ApiError(502, fmt::format("backend {} failed: {}", pool_.address(backend).url, call->error()), "",
                         "bad_gateway");
        }
        if (call->status() == 503) {  // overloaded or draining: another may take it, or this one later
          excluded[static_cast<size_t>(backend)] = true;
          metrics_.failed(backend, "busy");
          if (std::count(excluded.begin(), excluded.end(), false) > 0) continue;
          // Every healthy backend is saturated: wait in the router's queue, then try them all again.
          if (!queue_place) {
            queue_place.reset(new QueuePlace{queued_});
            if (queued_.fetch_add(1) >= options_.max_queued) {
              metrics_.rejected("queue_full");
              throw ApiError(
                  429,
                  fmt::format("every instance is saturated and {} requests already wait in the router; retry later",
                              options_.max_queued),
                  "", "server_saturated");
            }
            queued_since = Clock::now();
          }
          if (Clock::now() - queued_since > options_.queue_timeout) {
            metrics_.rejected("queue_timeout");
            throw ApiError(429,
                           fmt::format("every instance stayed saturated for {} s; retry later",
                                       std::chrono::duration<double>(options_.queue_timeout).count()),
                           "", "server_saturated");
          }
          call.reset();
          placement.reset();
          for (int waited = 0; waited < kQueueRetryInterval / kPollInterval; ++waited) {
            std::this_thread::sleep_for(kPollInterval);
            if (watch->client_gone()) {
              res.status = 499;
              return;
            }
          }
          std::fill(excluded.begin(), excluded.end(), false);
          continue;
        }
        break;
      }

      remember_session(session, placement->backend);
      res.set_header(kBackendHeader, pool_.address(placement->backend).url);
      const bool streamed = call->content_type().rfind("text/event-stream", 0) == 0;
      res.status = call->status();
      if (!call->retry_after().empty()) res.set_header("Retry-After", call->retry_after());
      if (!streamed) {
        std::string body;
        for (;;) {
          UpstreamCall::State state;
          body += call->take_body(kPollInterval, state);
          if (state == UpstreamCall::State::kDone) break;
          if (state == UpstreamCall::State::kFailed) {
            placement->failed = true;
            metrics_.failed(placement->backend, "upstream_error");
            fmt::print(stderr, "router: request {} to {} failed: {}\n", request_id,
                       pool_.address(placement->backend).url, call->error());
            throw ApiError(502,
                           fmt::format("backend {} failed: {}", pool_.address(placement->backend).url, call->error()),
                           "", "bad_gateway");
          }
          if (watch->client_gone()) {
            call->cancel();
            placement->failed = true;
            metrics_.failed(placement->backend, "client_gone");
            res.status = 499;
            return;
          }
        }
        const std::string type = call->content_type();
        res.set_content(body, type.empty() ? "application/json" : type.c_str());
        if (res.status == 200) metrics_.answered(seconds_since(received));
        return;
      }

      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      ++open_streams_;
      // When the stream's first and latest chunks were relayed (TTFT, ITL).
      struct StreamTimes {
        Clock::time_point received, last;
        bool any = false;
      };
      auto times = std::make_shared<StreamTimes>(StreamTimes{received, received});
      const bool counted = res.status == 200;
      auto relay = std::make_shared<RelayedStream>(
          RelayedStream{call, placement, migration, routing, std::move(excluded), req.path});
      res.set_chunked_content_provider(
          call->content_type(),
          [this, relay, watch, times, counted, request_id](size_t, httplib::DataSink& sink) {
            UpstreamCall::State state;
            std::string out = relay->call->take_body(kPollInterval, state);
            if (relay->migration) out = relay->migration->relay(out);
            if (state == UpstreamCall::State::kFailed && relay->migration && counted &&
                continue_elsewhere(*relay, request_id, *watch)) {
              state = UpstreamCall::State::kWaiting;  // the stream goes on from the next instance
            } else if (state == UpstreamCall::State::kFailed) {
              // The backend died mid-stream: end the stream with an error the client can read.
              relay->placement->failed = true;
              metrics_.failed(relay->placement->backend, "upstream_error");
              fmt::print(stderr, "router: request {} to {} failed mid-stream: {}\n", request_id,
                         pool_.address(relay->placement->backend).url, relay->call->error());
              const ApiError e(502,
                               fmt::format("backend {} failed mid-stream: {}",
                                           pool_.address(relay->placement->backend).url, relay->call->error()),
                               "", "bad_gateway");
              out += "data: " + e.to_json().dump() + "\n\n";
            }
            if (!out.empty() && counted && state != UpstreamCall::State::kFailed) {
              const auto now = Clock::now();
              if (!times->any) metrics_.first_chunk(std::chrono::duration<double>(now - times->received).count());
              else metrics_.chunk_gap(std::chrono::duration<double>(now - times->last).count());
              times->any = true;
              times->last = now;
            }
            if (!out.empty() && !sink.write(out.data(), out.size())) {
              relay->call->cancel();
              return false;
            }
            if (state == UpstreamCall::State::kDone || state == UpstreamCall::State::kFailed) {
              if (state == UpstreamCall::State::kDone && counted) metrics_.answered(seconds_since(times->received));
              sink.done();
              return true;
            }
            if (watch->client_gone()) {
              relay->call->cancel();
              return false;
            }
            return true;
          },
          [this, relay](bool success) {
            if (!success) {
              relay->call->cancel();
              relay->placement->failed = true;
            }
            --open_streams_;
          });
    };
  };
  http.Post("/v1/completions", completion(ApiEndpoint::kCompletions));
  http.Post("/v1/chat/completions", completion(ApiEndpoint::kChatCompletions));
}

}  // namespace pagedkv::router
