#include "pagedkv/server/openai_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <malloc.h>
#include <ctime>
#include <random>
#include <algorithm>
#include <cstdlib>
#include <set>

#include "pagedkv/api/api_error.h"
#include "pagedkv/api/http_listener.h"
#include "pagedkv/api/kv_events_wire.h"
#include "pagedkv/api/peer_connection.h"
#include "pagedkv/api/request_id.h"
#include "pagedkv/core/error.h"
#include "pagedkv/engine/grammar_vocabulary.h"
#include "pagedkv/grammar/grammar_limits.h"
#include "pagedkv/server/dashboard_page.h"
#include "pagedkv/server/dashboard_state.h"
#include "pagedkv/server/response_builder.h"
#include "pagedkv/version.h"

namespace pagedkv::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kPollInterval = 20ms;  // how often a waiting handler checks that its client is still there

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

// Response ids and default seeds: unique within the process, unpredictable across processes.
class IdSource {
 public:
  IdSource() : base_(std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32)) {}
  uint64_t next() {
    uint64_t z = base_ + 0x9E3779B97F4A7C15ull * ++counter_;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t base_;
  std::atomic<uint64_t> counter_{0};
};
IdSource& ids() {
  static IdSource source;
  return source;
}

// With --api-key, every route needs the key except the liveness probe and the dashboard's page
// itself (static HTML; the state it polls needs the key, which the page takes from its URL's
// #key= fragment, never sent to the server).
bool needs_api_key(const std::string& path) { return path != "/health" && path != "/dashboard" && path != "/"; }

}  // namespace

OpenAIServer::OpenAIServer(ServerOptions options, EngineService& service, const TextTokenizer& tokenizer,
                           ServedModel model, ServerMetrics& metrics)
    : options_(std::move(options)),
      service_(service),
      tokenizer_(tokenizer),
      model_(std::move(model)),
      metrics_(metrics),
      http_(std::make_unique<api::HttpListener>()),
      snapshots_(std::make_unique<DashboardSnapshots>(service, options_.dashboard_period)) {
  const size_t threads = static_cast<size_t>(std::max(2, options_.http_threads));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_timeout(options_.keep_alive_seconds);
  http_->set_tcp_nodelay(true);  // SSE chunks are small: send each at once
  install_routes();
}

OpenAIServer::~OpenAIServer() = default;

int OpenAIServer::bind() {
  return static_cast<api::HttpListener&>(*http_).bind_with_backlog(options_.host, options_.port,
                                                                   options_.listen_backlog);
}

void OpenAIServer::serve() { static_cast<api::HttpListener&>(*http_).serve_until_stopped(); }

void OpenAIServer::stop() { static_cast<api::HttpListener&>(*http_).stop_serving(); }

std::shared_ptr<const grammar::CompiledGrammar> OpenAIServer::compile(const api::StructuredOutputRequest& spec) {
  std::call_once(grammar_once_, [this] {
    // The tokens that end a generation of this model: the grammar allows them where it can end.
    std::vector<TokenId> stops = model_.end_of_generation_ids;
    if (model_.eos_token_id >= 0) stops.push_back(model_.eos_token_id);
    grammars_ = std::make_unique<grammar::GrammarCache>(
        make_grammar_vocabulary(tokenizer_, std::move(stops), model_.limits.vocab_size), model_.grammar_cache_capacity);
  });
  // A compile that ran long (a cache miss of a large grammar, or one stopped at a limit) may have
  // used tens of MiB of scratch on this HTTP thread's malloc arena; glibc keeps an arena's freed
  // memory, and each of the many HTTP threads has its own, so a client repeating such requests
  // would grow the process by that much per thread. Give it back.
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  constexpr double kLongCompileSeconds = 0.02;
  try {
    std::shared_ptr<const grammar::CompiledGrammar> compiled = grammars_->get(spec.kind, spec.text);
    const double took = seconds();
    metrics_.count_structured_output(grammar::grammar_kind_name(spec.kind), took);
    if (took > kLongCompileSeconds) malloc_trim(0);
    return compiled;
  } catch (const grammar::GrammarError& e) {
    if (seconds() > kLongCompileSeconds) malloc_trim(0);
    throw api::ApiError(400, fmt::format("invalid {}: {}", spec.param, e.what()), spec.param, "invalid_grammar");
  }
}

void OpenAIServer::install_routes() {
  httplib::Server& http = *http_;

  static_cast<api::HttpListener&>(http).use_api_errors("server");
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    // Known routes only: a label per arbitrary path would let clients grow the metrics without bound.
    static const std::set<std::string> kRoutes{"/v1/completions",
                                               "/v1/chat/completions",
                                               "/v1/models",
                                               "/health",
                                               "/metrics",
                                               "/tokenize",
                                               "/detokenize",
                                               "/apply-template",
                                               "/reset_prefix_cache",
                                               "/version",
                                               "/kv_events",
                                               "/dashboard",
                                               "/dashboard/state",
                                               "/"};
    metrics_.count_http_request(kRoutes.contains(req.path) ? req.path : "other");
    if (res.status >= 400) metrics_.count_http_error(res.status);
  });
  // CORS first: a browser's preflight carries no key.
  static_cast<api::HttpListener&>(http).allow_origins(options_.allowed_origins);
  static_cast<api::HttpListener&>(http).require_api_key(options_.api_keys, needs_api_key);

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (service_.draining())
      api::send_api_error(res, api::ApiError(503, "the server is shutting down", "", "shutting_down"));
    else send_json(res, 200, json::object());
  });
  http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"version", PAGEDKV_VERSION_STRING}});
  });
  // The dashboard: the page, and the snapshot it polls (docs/serve.md, "Dashboard").
  auto page = [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(dashboard_page()), "text/html; charset=utf-8");
  };
  http.Get("/dashboard", page);
  http.Get("/", [page](const httplib::Request& req, httplib::Response& res) {
    // API clients that ask for JSON get the model list, browsers the dashboard.
    if (req.get_header_value("Accept").find("application/json") != std::string::npos) {
      res.status = 307;
      res.set_header("Location", "/v1/models");
      return;
    }
    page(req, res);
  });
  http.Get("/dashboard/state", [this](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(snapshots_->get(), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // The KV events of this instance for routers (docs/router.md, "The events"): everything after
  // sequence number `since` of epoch `epoch`, or a snapshot when that cannot be had.
  http.Get("/kv_events", [this](const httplib::Request& req, httplib::Response& res) {
    if (!options_.kv_events) throw api::ApiError(404, "this server does not publish KV events", "", "not_found");
    auto number = [&req](const char* name, int base, uint64_t fallback) {
      if (!req.has_param(name)) return fallback;
      const std::string text = req.get_param_value(name);
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(text.c_str(), &end, base);
      if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE)
        throw api::ApiError(400,
                            fmt::format("'{}' must be a non-negative integer{}", name, base == 16 ? " in hex" : ""),
                            name, "invalid_value");
      return static_cast<uint64_t>(v);
    };
    const uint64_t epoch = number("epoch", 16, 0);
    const uint64_t since = number("since", 10, 0);
    const uint64_t max_events = std::clamp<uint64_t>(number("max", 10, 10000), 1, 100000);
    const api::KVEventsPage log_page = options_.kv_events->read(epoch, since, static_cast<size_t>(max_events));
    const api::InstanceLoad load = service_.load();
    res.set_content(api::format_kv_events_page(log_page, options_.prefix_hashing, load), "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const std::string& name = model_.limits.served_model_name;
    send_json(res, 200,
              {{"object", "list"},
               {"data", json::array({{{"id", name},
                                      {"object", "model"},
                                      {"created", unix_now()},
                                      {"owned_by", "pagedkv"},
                                      {"root", name},
                                      {"max_model_len", model_.limits.max_model_len}}})}});
  });

  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const api::TokenizeRequest request = api::parse_tokenize_request(req.body);
    if (!request.prompt && !model_.model_template)
      api::refuse_tools_in_built_in_template(request.chat_input, model_.chat_template);
    // Messages: the same rendering /v1/chat/completions uses.
    const std::vector<TokenId> tokens =
        request.prompt ? api::encode_bounded(tokenizer_, *request.prompt, request.add_special_tokens,
                                             model_.limits.max_model_len, "prompt")
        : model_.model_template
            ? api::encode_bounded(tokenizer_, model_.model_template->render(request.chat_input), false,
                                  model_.limits.max_model_len, "messages")
            : api::encode_bounded(tokenizer_, api::render_chat(model_.chat_template, request.messages),
                                  request.add_special_tokens, model_.limits.max_model_len, "messages");
    send_json(res, 200, {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", model_.limits.max_model_len}});
  });
  // llama-server's /apply-template: a chat request's template fields in, the rendered prompt out.
  http.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    api::TokenizeRequest request = api::parse_tokenize_request(req.body);
    if (request.prompt) throw api::ApiError(400, "'messages' is required", "messages", "missing_field");
    if (!model_.model_template) api::refuse_tools_in_built_in_template(request.chat_input, model_.chat_template);
    std::string prompt;
    if (model_.model_template) {
      prompt = model_.model_template->render_text(request.chat_input);
    } else {
      for (const PromptPart& part : api::render_chat(model_.chat_template, request.messages)) prompt += part.text;
    }
    send_json(res, 200, {{"prompt", prompt}});
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const std::vector<TokenId> tokens = api::parse_detokenize_request(req.body, model_.limits.vocab_size);
    send_json(res, 200, {{"prompt", detokenize(tokenizer_, tokens)}});
  });
  auto reset_prefix_cache = [this](const httplib::Request&, httplib::Response& res) {
    if (!options_.admin_endpoints) {
      api::send_api_error(
          res, api::ApiError(403, "admin endpoints are disabled on this server (--disable-admin-endpoints)", "",
                             "admin_disabled"));
      return;
    }
    const ResetResult r = service_.call([](LLMEngine& engine) { return engine.reset_prefix_cache(); });
    send_json(res, 200, {{"removed_blocks", r.removed}, {"kept_in_use", r.kept_in_use}, {"complete", r.complete()}});
  };
  http.Post("/reset_prefix_cache", reset_prefix_cache);
  static_cast<api::HttpListener&>(http).post_without_body("/reset_prefix_cache", reset_prefix_cache);

  auto completion = [this](api::ApiEndpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      const auto arrival = std::chrono::steady_clock::now();
      auto request =
          std::make_shared<api::CompletionRequest>(api::parse_completion_request(req.body, endpoint, options_.limits));
      std::vector<api::PreparedPrompt> prompts =
          api::prepare_request(*request, tokenizer_, model_.limits, model_.chat_template, model_.model_template.get());
      // Tool calls: read out of the output, and forced by a grammar of the model's call syntax
      // with tool_choice "required" or a named function.
      const api::ToolCallParser* tool_parser = nullptr;
      if (request->tools.parses_calls()) {
        if (!model_.tool_parser)
          throw api::ApiError(400,
                              "the served model's chat template shows no tool-call format this server reads; start it "
                              "with --tool-call-parser NAME (or send tool_choice \"none\")",
                              "tools", "unsupported_tools");
        tool_parser = model_.tool_parser.get();
        if (request->tools.forces_calls()) {
          const std::vector<api::ToolDefinition> callable = request->tools.callable();
          request->structured_output = api::StructuredOutputRequest{
              grammar::GrammarKind::kGbnf, tool_parser->forced_call_grammar(callable, request->tools.parallel_calls),
              "tool_choice"};
        }
      }
      // Structured output: compiled here (the cache's, or now), never on the engine thread.
      std::shared_ptr<const grammar::CompiledGrammar> grammar;
      if (request->structured_output) grammar = compile(*request->structured_output);
      const uint64_t seed = request->seed.value_or(ids().next());
      std::vector<GenerationRequest> generations;
      for (api::PreparedPrompt& p : prompts) {
        GenerationRequest g;
        g.prompt = std::move(p.token_ids);
        g.sampling.temperature = request->temperature;
        g.sampling.top_p = request->top_p;
        g.sampling.top_k = request->top_k;
        g.sampling.min_p = request->min_p;
        g.sampling.seed = seed;
        g.sampling.logit_bias = request->logit_bias;
        g.sampling.presence_penalty = request->presence_penalty;
        g.sampling.frequency_penalty = request->frequency_penalty;
        g.sampling.repetition_penalty = request->repetition_penalty;
        g.stop.max_tokens = p.max_tokens;
        g.stop.min_tokens = std::min(request->min_tokens, p.max_tokens);
        g.stop.eos_token_id = model_.eos_token_id;
        g.stop.ignore_eos = request->ignore_eos;
        if (!request->ignore_eos) g.stop.stop_token_ids = model_.end_of_generation_ids;
        // The client's stop tokens end a choice even with ignore_eos (vLLM's rule).
        g.stop.stop_token_ids.insert(g.stop.stop_token_ids.end(), request->stop_token_ids.begin(),
                                     request->stop_token_ids.end());
        g.n = request->n;
        if (request->use_beam_search) {  // vLLM's convention: n is the beam width
          g.beam_width = request->n;
          g.n = 1;
          g.sampling.temperature = 0.0f;  // unused by beams; width 1 runs as greedy decoding
        }
        g.priority = request->priority;
        g.cache_salt = request->cache_salt;
        g.logprobs = request->logprobs;
        g.prompt_logprobs = request->prompt_logprobs;
        g.grammar = grammar;
        generations.push_back(std::move(g));
      }
      const int num_prompts = static_cast<int>(generations.size());
      // The client's socket, found once: the engine thread aborts the request within a step of
      // its closing, the handler below stops waiting at its next check.
      const api::PeerConnection peer = api::PeerConnection::find(req.local_port, req.remote_addr, req.remote_port);
      std::shared_ptr<RequestStream> stream = service_.submit(std::move(generations), peer.fd());
      const bool chat = endpoint == api::ApiEndpoint::kChatCompletions;
      const std::string client_id = req.get_header_value(api::kRequestIdHeader);
      const std::string request_id =
          api::is_valid_request_id(client_id) ? client_id : fmt::format("{:016x}", ids().next());
      res.set_header(api::kRequestIdHeader, request_id);
      auto builder = std::make_shared<ResponseBuilder>(
          *request, tokenizer_, fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", request_id),
          model_.limits.served_model_name, unix_now(), num_prompts, tool_parser, ids().next());
      auto disconnect = std::make_shared<api::DisconnectCheck>(peer, kPollInterval);
      // The deadline: the server's limit, or the request's own `timeout` if that is sooner.
      std::chrono::milliseconds limit = options_.request_timeout;
      if (request->timeout) limit = limit.count() > 0 ? std::min(limit, *request->timeout) : *request->timeout;
      const auto deadline = limit.count() > 0 ? arrival + limit : std::chrono::steady_clock::time_point::max();
      const api::ApiError timed_out(
          408,
          fmt::format("the request did not finish within its time limit of {} s and was aborted",
                      static_cast<double>(limit.count()) / 1e3),
          request->timeout && *request->timeout == limit ? "timeout" : "", "request_timeout");

      if (!request->stream) {
        while (!builder->done()) {
          const std::vector<ChoiceUpdate> updates = stream->wait(kPollInterval);
          for (const ChoiceUpdate& u : updates) builder->apply(u);
          for (RequestId id : builder->take_stop_requests()) service_.stop_choice(id);
          if (disconnect->client_gone()) {  // nobody to answer: free the engine's blocks now
            service_.cancel(stream);
            res.status = 499;  // never sent; counted in the metrics as a client disconnect
            return;
          }
          if (!builder->done() && std::chrono::steady_clock::now() >= deadline) {
            service_.cancel(stream);  // its blocks return before the engine's next step
            throw timed_out;
          }
        }
        if (builder->error()) throw api::ApiError(400, *builder->error(), "prompt", "request_rejected");
        send_json(res, 200, builder->response());
        return;
      }

      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      const bool include_usage = request->include_usage;
      // When the stream last wrote (for the keep-alive pings), and whether it ended at its deadline.
      struct StreamClock {
        std::chrono::steady_clock::time_point last_write;
        bool timed_out = false;
      };
      auto clock = std::make_shared<StreamClock>(StreamClock{arrival});
      const auto ping_interval = options_.sse_ping_interval;
      ++open_streams_;  // until the releaser below: httplib calls it once, however the stream ends
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, stream, builder, disconnect, include_usage, request, clock, ping_interval, deadline, timed_out](
              size_t, httplib::DataSink& sink) {
            const std::vector<ChoiceUpdate> updates = stream->wait(kPollInterval);
            std::string out;
            for (const ChoiceUpdate& u : updates)
              for (const std::string& chunk : builder->apply(u)) out += "data: " + chunk + "\n\n";
            for (RequestId id : builder->take_stop_requests()) service_.stop_choice(id);
            const auto now = std::chrono::steady_clock::now();
            if (!builder->done() && now >= deadline) {
              // Aborted at its deadline: the error as an event, then the end of the stream.
              service_.cancel(stream);
              clock->timed_out = true;
              out += "data: " + json_text(timed_out.to_json()) + "\n\ndata: [DONE]\n\n";
              if (!sink.write(out.data(), out.size())) return false;
              sink.done();
              return true;
            }
            if (out.empty() && !builder->done() && ping_interval.count() > 0 &&
                now - clock->last_write >= ping_interval)
              out = ": ping\n\n";  // an SSE comment: keeps proxies and clients from timing the stream out
            if (!out.empty()) clock->last_write = now;
            if (builder->done()) {
              if (builder->error())
                out += "data: " +
                       json_text(api::ApiError(400, *builder->error(), "prompt", "request_rejected").to_json()) +
                       "\n\n";
              if (include_usage) out += "data: " + builder->usage_chunk() + "\n\n";
              out += "data: [DONE]\n\n";
            }
            if (!out.empty() && !sink.write(out.data(), out.size())) {
              service_.cancel(stream);
              return false;
            }
            if (builder->done()) {
              sink.done();
              return true;
            }
            if (disconnect->client_gone()) {
              service_.cancel(stream);
              return false;
            }
            return true;
          },
          [this, stream, builder, clock](bool success) {
            if (!success || !builder->done()) service_.cancel(stream);
            if (clock->timed_out) metrics_.count_http_error(408);  // the stream's status was 200
            --open_streams_;
          });
    };
  };
  http.Post("/v1/completions", completion(api::ApiEndpoint::kCompletions));
  http.Post("/v1/chat/completions", completion(api::ApiEndpoint::kChatCompletions));
}

}  // namespace pagedkv::server
