// OpenAIServer: the HTTP front of pagedkv serve (cpp-httplib), speaking OpenAI's API plus vLLM's
// extras: /v1/completions, /v1/chat/completions (streamed as server-sent events or whole),
// /v1/models, /health, /metrics, /tokenize, /detokenize, /reset_prefix_cache, /version, the KV
// events routers index (/kv_events, docs/router.md), and a live dashboard of the KV cache (/dashboard,
// /dashboard/state; also / for browsers).
//
// Each HTTP request runs on one of httplib's worker threads, which parses and validates it,
// submits it to the EngineService and then waits on its RequestStream, writing chunks as tokens
// arrive. A client that goes away (a failed write, or a closed socket seen while waiting) has
// its engine request cancelled. Errors are OpenAI's error object with the right status.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pagedkv/api/kv_event_log.h"
#include "pagedkv/api/openai_request.h"
#include "pagedkv/api/tool_call_parser.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/grammar/grammar_cache.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"
#include "pagedkv/server/engine_service.h"
#include "pagedkv/server/server_metrics.h"

namespace httplib {
class Server;
}

namespace pagedkv::server {

class DashboardSnapshots;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() returns it)
  // Non-empty: "Authorization: Bearer <one of these>" on every route but /health and the
  // dashboard's static page (any key works; the rest get 401).
  std::vector<std::string> api_keys;
  // CORS: the origins browsers may call from ("*": any); empty: no CORS headers (HttpListener).
  std::vector<std::string> allowed_origins;
  // A streamed response that has written nothing for this long (queued, in a long prefill) gets an
  // SSE comment (": ping"), which clients ignore and proxies see as traffic. 0: never.
  std::chrono::milliseconds sse_ping_interval{0};
  // The longest a completion may take, from its arrival, unless its `timeout` field asks for less
  // (0: no limit). Past it the request is aborted (its KV blocks freed) and answered 408.
  std::chrono::milliseconds request_timeout{0};
  bool admin_endpoints = true;  // false: /reset_prefix_cache answers 403
  size_t max_body_bytes = 8u << 20;  // larger request bodies get 413
  int http_threads = 128;  // concurrent connections served (each stream holds one)
  int keep_alive_seconds = 5;
  int listen_backlog = 1024;  // connections waiting to be accepted
  // The dashboard's snapshot of the engine is taken at most this often, however many viewers.
  std::chrono::milliseconds dashboard_period{250};
  api::RequestLimits limits;
  // GET /kv_events serves this log (null: the route answers 404), with the engine's hashing.
  const api::KVEventLog* kv_events = nullptr;
  api::PrefixHashing prefix_hashing;
};

// What the server needs to know of the served model.
struct ServedModel {
  api::ModelLimits limits;  // name, max_model_len, vocab size
  TokenId eos_token_id = -1;  // ends a generation unless ignore_eos
  // More tokens that end a generation unless ignore_eos: a GGUF vocabulary's end-of-turn tokens
  // (EOT, EOM, <|im_end|>, <end_of_turn>, ...; TextTokenizer::end_of_generation_ids).
  std::vector<TokenId> end_of_generation_ids;
  // Compiled structured-output grammars kept for reuse (response_format, structured_outputs).
  size_t grammar_cache_capacity = 256;
  api::ChatTemplate chat_template = api::ChatTemplate::kDefault;  // how /v1/chat/completions renders messages
  // The model's own (Jinja) chat template; when set, it renders chat messages instead.
  std::shared_ptr<const api::ModelChatTemplate> model_template;
  // How the model writes tool calls (--tool-call-parser, or detected from its template); null:
  // requests that would parse calls are refused.
  std::shared_ptr<const api::ToolCallParser> tool_parser;
};

class OpenAIServer {
 public:
  OpenAIServer(ServerOptions options, EngineService& service, const TextTokenizer& tokenizer, ServedModel model,
               ServerMetrics& metrics);
  ~OpenAIServer();
  OpenAIServer(const OpenAIServer&) = delete;
  OpenAIServer& operator=(const OpenAIServer&) = delete;

  // Binds host:port; returns the bound port. Throws Error if it cannot.
  int bind();
  // Serves until stop(); returns after the in-flight requests' handlers have returned.
  void serve();
  // Stops accepting connections (thread-safe; serve() then returns once handlers finish). It
  // also ends every streamed response still being written (httplib stops chunked providers when
  // its listener closes): drain first, then stop once open_streams() is 0.
  void stop();
  // Streamed responses whose last chunk has not been written yet.
  int open_streams() const { return open_streams_.load(); }

 private:
  void install_routes();
  // The compiled grammar of a request's structured output, from the process's cache (compiled
  // here, on the HTTP thread, on a miss). Throws ApiError 400 naming the field for a grammar the
  // grammar layer refuses.
  std::shared_ptr<const grammar::CompiledGrammar> compile(const api::StructuredOutputRequest& spec);

  ServerOptions options_;
  EngineService& service_;
  const TextTokenizer& tokenizer_;
  ServedModel model_;
  ServerMetrics& metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<DashboardSnapshots> snapshots_;
  std::atomic<int> open_streams_{0};
  // Built on the first structured-output request: the vocabulary's bytes, then the cache.
  std::once_flag grammar_once_;
  std::unique_ptr<grammar::GrammarCache> grammars_;
};

}  // namespace pagedkv::server
