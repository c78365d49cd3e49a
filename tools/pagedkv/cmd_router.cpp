// pagedkv router: a KV-cache-aware front for several pagedkv serve instances (docs/router.md).
//
// Threads: main (signals and shutdown), one monitor per backend (health and KV events), and
// httplib's workers (one per client connection, plus one per request in flight to a backend).
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "command.h"
#include "engine_options.h"
#include "pagedkv/core/error.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/model/model_file.h"
#include "pagedkv/router/backend_pool.h"
#include "pagedkv/router/backends_file.h"
#include "pagedkv/router/router_metrics.h"
#include "pagedkv/router/router_server.h"

namespace pagedkv::cli {
namespace {

struct RouterCliOptions {
  std::vector<std::string> backends;
  std::string policy = "kv";
  std::string model, tokenizer;
  int context_length = 0;
  int max_model_len = 0;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key, backend_api_key, admin_api_key;
  std::string backends_file;
  double backends_file_interval_s = 1;
  // The defaults of RoutingWeights (router/routing_policy.h says why).
  double prefill_scale = router::RoutingWeights{}.prefill_scale, device_credit = router::RoutingWeights{}.device_credit,
         host_credit = router::RoutingWeights{}.host_credit, disk_credit = router::RoutingWeights{}.disk_credit;
  uint64_t seed = 0;
  int events_interval_ms = 50, health_interval_ms = 500, poll_timeout_ms = 2000;
  int connect_timeout_ms = 1000;
  double upstream_timeout_s = 600;
  int http_threads = 256;
  std::string max_body_bytes = "8MiB";
  int max_queued_requests = 256;
  bool no_connection_reuse = false;
  int migration_limit = 0;
  double queue_timeout_s = 30;
  bool no_tokenizer = false;
};

int run_router(RouterCliOptions o) {
  const auto policy = router::parse_routing_policy(o.policy);
  if (!policy)
    throw ConfigError(fmt::format("--policy must be kv, round-robin, least-load or random, got '{}'", o.policy));
  if (o.backends.empty() && o.backends_file.empty())
    throw ConfigError("give at least one --backend http://host:port, or --backends-file");
  if (!(o.backends_file_interval_s > 0)) throw ConfigError("--backends-file-interval-s must be positive");
  if (o.port < 0 || o.port > 65535) throw ConfigError(fmt::format("--port must be in [0, 65535], got {}", o.port));
  for (double w : {o.prefill_scale, o.device_credit, o.host_credit, o.disk_credit})
    if (!(w >= 0)) throw ConfigError("--prefill-scale and the credits must be at least 0");
  if (o.events_interval_ms < 1 || o.health_interval_ms < 1 || o.poll_timeout_ms < 1 || o.connect_timeout_ms < 1)
    throw ConfigError("the intervals and timeouts must be at least 1 ms");
  if (!(o.upstream_timeout_s > 0)) throw ConfigError("--upstream-timeout-s must be positive");
  if (o.http_threads < 2) throw ConfigError(fmt::format("--http-threads must be at least 2, got {}", o.http_threads));

  std::vector<router::BackendAddress> addresses;
  for (const std::string& url : o.backends) addresses.push_back(router::BackendAddress::parse(url));

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // The router tokenizes prompts exactly as the backends do: it loads the same model file (the
  // weights stay unused; a GGUF file is memory-mapped, so they are not even read).
  std::optional<LoadedModel> loaded;
  router::RoutedModel routed;
  if (!o.no_tokenizer) {
    if (o.model.empty()) {
      o.model = default_shared_dir() + "/models/stories260K.bin";
      if (o.tokenizer.empty()) o.tokenizer = default_shared_dir() + "/models/tok512.bin";
    }
    loaded.emplace(load_model_file(o.model, o.tokenizer, ModelFileOptions{o.context_length}));
    if (!loaded->tokenizer)
      throw ConfigError(fmt::format("{} has no tokenizer pagedkv can use ({}); pass --tokenizer or --no-tokenizer",
                                    o.model, loaded->tokenizer_error));
    routed.tokenizer = loaded->tokenizer.get();
    routed.vocab_size = loaded->model->config().vocab_size;
    routed.max_model_len = o.max_model_len > 0 ? std::min(o.max_model_len, loaded->model->config().seq_len)
                                               : loaded->model->config().seq_len;
  }

  router::BackendPoolOptions pool_options;
  pool_options.events_interval = std::chrono::milliseconds(o.events_interval_ms);
  pool_options.health_interval = std::chrono::milliseconds(o.health_interval_ms);
  pool_options.timeout = std::chrono::milliseconds(o.poll_timeout_ms);
  pool_options.api_key = o.backend_api_key;
  router::BackendPool pool(addresses, pool_options);  // the command line's backends stay (pinned)
  std::unique_ptr<router::BackendsFileWatcher> watcher;
  if (!o.backends_file.empty()) {
    // Read at start (an unreadable file or a bad line is an error here); later changes apply live.
    router::BackendsList listed = router::read_backends_file(o.backends_file);
    pool.sync(listed.addresses);
    watcher = std::make_unique<router::BackendsFileWatcher>(
        o.backends_file, std::move(listed.text), pool,
        std::chrono::milliseconds(static_cast<int64_t>(o.backends_file_interval_s * 1000)));
  }
  pool.start();
  if (watcher) watcher->start();
  pool.wait_until_checked(std::chrono::milliseconds(o.poll_timeout_ms) * 2);

  router::RoutingWeights weights{o.prefill_scale, o.device_credit, o.host_credit, o.disk_credit};
  router::RouterMetrics metrics(pool, std::string(router::routing_policy_name(*policy)));
  router::RouterOptions options;
  options.host = o.host;
  options.port = o.port;
  options.api_key = o.api_key;
  options.admin_api_key = o.admin_api_key;
  options.http_threads = o.http_threads;
  options.max_body_bytes = parse_byte_size(o.max_body_bytes);
  options.upstream.connect_timeout = std::chrono::milliseconds(o.connect_timeout_ms);
  options.upstream.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.upstream_timeout_s * 1000));
  options.upstream.api_key = o.backend_api_key;
  if (o.max_queued_requests < 0) throw ConfigError("--max-queued-requests must be 0 or more");
  if (!(o.queue_timeout_s >= 0)) throw ConfigError("--queue-timeout-s must be 0 or more");
  options.max_queued = o.max_queued_requests;
  options.reuse_connections = !o.no_connection_reuse;
  if (o.migration_limit < 0) throw ConfigError("--migration-limit must be 0 or more");
  options.migration_limit = o.migration_limit;
  options.queue_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.queue_timeout_s * 1000));
  router::RouterServer http(options, pool, router::BackendChooser(*policy, weights, o.seed), routed, metrics);
  const int port = http.bind();

  fmt::print("pagedkv router: policy {}, {} backend(s)\n", router::routing_policy_name(*policy), pool.size());
  for (const router::BackendState& s : pool.states())
    fmt::print("  {}  {}{}\n", s.address.url, s.healthy ? "healthy" : "not healthy",
               s.last_error.empty() || s.healthy ? "" : " (" + s.last_error + ")");
  fmt::print("pagedkv router: listening on http://{}:{}\n", o.host, port);
  std::fflush(stdout);

  std::atomic<bool> serving{true};
  std::thread serve_thread([&] {
    http.serve();
    serving = false;
  });
  while (serving) {
    const timespec tick{0, 200'000'000};
    if (sigtimedwait(&signals, nullptr, &tick) > 0) break;
  }
  // Streams in flight get a bounded time to finish; the backends keep serving them meanwhile.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (http.open_streams() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http.stop();
  serve_thread.join();
  if (watcher) watcher->stop();
  pool.stop();
  fmt::print("pagedkv router: stopped\n");
  return 0;
}

const CommandRegistration kRouterCommand{Command{
    "router", "a KV-cache-aware router in front of several pagedkv serve instances (docs/router.md)",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<RouterCliOptions>();
      sub.add_option("--backend,-b", o->backends, "a pagedkv serve instance, http://host:port (repeat for each)");
      sub.add_option("--backends-file", o->backends_file,
                     "a file listing backends, one http://host:port a line ('#' comments); re-read while running");
      sub.add_option("--backends-file-interval-s", o->backends_file_interval_s,
                     "how often the backends file is checked")
          ->capture_default_str();
      sub.add_option("--policy", o->policy, "kv, round-robin, least-load or random")->capture_default_str();
      sub.add_option("--model,-m", o->model, "the backends' model file, for its tokenizer (default: stories260K)");
      sub.add_option("--tokenizer,-z", o->tokenizer, "the backends' tokenizer (as pagedkv serve's --tokenizer)");
      sub.add_option("--context-length", o->context_length, "GGUF: as pagedkv serve's --context-length");
      sub.add_option("--max-model-len", o->max_model_len, "as the backends' --max-model-len (0: the model's)");
      sub.add_flag("--no-tokenizer", o->no_tokenizer, "load no model: text prompts are routed by load alone");
      sub.add_option("--host", o->host, "address to listen on")->capture_default_str();
      sub.add_option("--port", o->port, "port to listen on (0: any free port, printed at start)")
          ->capture_default_str();
      sub.add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' from clients (all but /health)");
      sub.add_option("--backend-api-key", o->backend_api_key, "the key the backends require");
      sub.add_option("--admin-api-key", o->admin_api_key,
                     "the key for /router/backends (add and remove backends; default: --api-key; neither: off)");
      sub.add_option("--prefill-scale", o->prefill_scale, "kv policy: weight of the blocks left to prefill")
          ->capture_default_str();
      sub.add_option("--device-credit", o->device_credit, "kv policy: credit of a prefix block in the device pool")
          ->capture_default_str();
      sub.add_option("--host-credit", o->host_credit, "kv policy: credit of a prefix block in the host tier")
          ->capture_default_str();
      sub.add_option("--disk-credit", o->disk_credit, "kv policy: credit of a prefix block in the disk tier")
          ->capture_default_str();
      sub.add_option("--seed", o->seed, "random policy: the seed")->capture_default_str();
      sub.add_option("--events-interval-ms", o->events_interval_ms, "how often each backend's KV events are read")
          ->capture_default_str();
      sub.add_option("--health-interval-ms", o->health_interval_ms, "how often each backend's /health is checked")
          ->capture_default_str();
      sub.add_option("--poll-timeout-ms", o->poll_timeout_ms, "timeout of a health check or events read")
          ->capture_default_str();
      sub.add_option("--connect-timeout-ms", o->connect_timeout_ms, "timeout to connect to a backend for a request")
          ->capture_default_str();
      sub.add_option("--upstream-timeout-s,--upstream-timeout", o->upstream_timeout_s,
                     "seconds a backend may stay silent mid-request")
          ->capture_default_str();
      sub.add_option("--http-threads", o->http_threads, "HTTP worker threads (each open stream holds one)")
          ->capture_default_str();
      sub.add_option("--max-body-bytes", o->max_body_bytes, "larger request bodies get 413")->capture_default_str();
      sub.add_option("--max-queued-requests", o->max_queued_requests,
                     "requests that may wait in the router while every backend is saturated (beyond: 429)")
          ->capture_default_str();
      sub.add_option("--migration-limit", o->migration_limit,
                     "times a streamed answer may move to another instance when its own dies mid-stream (0: never)")
          ->capture_default_str();
      sub.add_flag("--no-connection-reuse", o->no_connection_reuse,
                   "open a new connection to the backend for every request (default: reuse kept-alive ones)");
      sub.add_option("--queue-timeout-s", o->queue_timeout_s,
                     "seconds a request may wait for a backend with room (then 429)")
          ->capture_default_str();
      return [o] { return run_router(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
