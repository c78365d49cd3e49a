// pagedkv serve: an OpenAI-compatible HTTP server on the paged engine (docs/serve.md).
//
// Threads: main (signals and shutdown), the engine thread (EngineService: owns the LLMEngine and
// steps it), and httplib's workers (one per connection being served). SIGTERM or SIGINT drains:
// new requests get 503, accepted requests get --drain-timeout-s to finish (the rest are aborted and
// still answered), the KV tiers are flushed (a warm restart finds the disk tier), exit 0.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "command.h"
#include "engine_options.h"
#include "on_off_flag.h"
#include "preload_progress.h"
#include "pagedkv/core/error.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/model/model_file.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "pagedkv/server/engine_service.h"
#include "pagedkv/api/model_chat_template.h"
#include "pagedkv/api/tool_call_parser.h"
#include "pagedkv/server/openai_server.h"

namespace pagedkv::cli {
namespace {

struct ServeOptions {
  std::string model, tokenizer, served_model_name;
  std::string chat_template;  // a Jinja file replacing the model's tokenizer.chat_template
  std::string bos_token, eos_token;  // the template's bos_token / eos_token where the vocabulary names none
  std::string tool_call_parser = "auto";  // a syntax name, "auto" (from the template) or "none"
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::vector<std::string> allowed_origins;
  double sse_ping_interval_seconds = 0;
  double request_timeout_seconds = 0;
  bool disable_admin_endpoints = false;
  std::string max_body_bytes = "8MiB";
  int max_waiting = 512;
  std::string stream_interval = "auto";  // a count, or "auto"
  int http_threads = 128;
  int max_model_len = 0;
  int context_length = 0;
  double drain_seconds = 30;
  size_t kv_events_capacity = 1u << 16;
  bool preload_weights = true;
  EngineOptions engine;
};

// --stream-interval: "auto" or a token count of at least 1.
int parse_stream_interval(const std::string& text) {
  if (text == "auto") return server::EngineServiceOptions::kAutoStreamInterval;
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1)
    throw ConfigError(fmt::format("--stream-interval must be 'auto' or a whole number of at least 1, got '{}'", text));
  return n;
}

// --api-key-file: one key a line; blank lines and lines starting with '#' are skipped, spaces
// around a key dropped. A file without keys is an error (it would silently open the server).
std::vector<std::string> read_api_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("--api-key-file: cannot read {}", path));
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    const size_t end = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(begin, end - begin + 1));
  }
  if (keys.empty()) throw ConfigError(fmt::format("--api-key-file: {} holds no key", path));
  return keys;
}

std::chrono::milliseconds seconds_option(double seconds, const char* name) {
  if (!(seconds >= 0 && seconds <= 1e6))
    throw ConfigError(fmt::format("{} must be in [0, 1e6] seconds, got {}", name, seconds));
  if (seconds > 0 && seconds < 1e-3) throw ConfigError(fmt::format("{} must be 0 (off) or at least 0.001", name));
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1e3)));
}

// The vocabulary's text of token `id` as a chat template prints it ("<s>", "<|begin_of_text|>"):
// the raw piece, which decoding would drop for control tokens. Empty when there is none.
std::string token_text(const TextTokenizer& tokenizer, TokenId id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return {};
  if (const auto* spm = dynamic_cast<const GgufTokenizer*>(&tokenizer)) return std::string(spm->piece(id));
  if (const auto* bpe = dynamic_cast<const GgufBpeTokenizer*>(&tokenizer)) return std::string(bpe->piece(id));
  return tokenizer.decode_piece(-1, id);
}

// The model's own chat template (--chat-template FILE, else the GGUF's tokenizer.chat_template),
// checked with a dry render; null when there is none (the hard-coded families render then).
std::string model_template_source(const ServeOptions& o, const LoadedModel& loaded) {
  if (o.chat_template.empty()) return loaded.chat_template;
  std::ifstream in(o.chat_template, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("--chat-template: cannot read {}", o.chat_template));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::shared_ptr<const api::ModelChatTemplate> load_model_template(const ServeOptions& o, const std::string& source,
                                                                  const TextTokenizer& tokenizer) {
  if (source.empty()) return nullptr;
  try {
    const std::string bos = o.bos_token.empty() ? token_text(tokenizer, tokenizer.bos_id()) : o.bos_token;
    const std::string eos = o.eos_token.empty() ? token_text(tokenizer, tokenizer.eos_id()) : o.eos_token;
    auto t = std::make_shared<const api::ModelChatTemplate>(source, bos, eos);
    t->check();
    // A marker the vocabulary has no token for is rendered as plain text: the model sees
    // something other than what it was trained on (a template meant for another model).
    std::vector<std::string> missing;
    for (const std::string& m : t->markers()) {
      const PromptPart part{m, true};
      if (tokenizer.encode_parts(std::span(&part, 1), false).size() != 1) missing.push_back(m);
    }
    if (!missing.empty())
      fmt::print(stderr,
                 "pagedkv serve: warning: the chat template writes {} that the vocabulary has no token for "
                 "(rendered as plain text): {}\n",
                 missing.size() == 1 ? "a marker" : "markers", fmt::join(missing, " "));
    return t;
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format(
        "{}: {}", o.chat_template.empty() ? o.model + " (tokenizer.chat_template)" : o.chat_template, e.what()));
  }
}

int run_serve(ServeOptions o) {
  if (o.model.empty()) {
    o.model = default_shared_dir() + "/models/stories260K.bin";
    if (o.tokenizer.empty()) o.tokenizer = default_shared_dir() + "/models/tok512.bin";
  }
  if (o.served_model_name.empty()) o.served_model_name = std::filesystem::path(o.model).stem().string();
  if (o.max_waiting < 1) throw ConfigError(fmt::format("--max-waiting must be at least 1, got {}", o.max_waiting));
  const int stream_interval = parse_stream_interval(o.stream_interval);
  if (o.http_threads < 2) throw ConfigError(fmt::format("--http-threads must be at least 2, got {}", o.http_threads));
  if (o.port < 0 || o.port > 65535) throw ConfigError(fmt::format("--port must be in [0, 65535], got {}", o.port));
  if (!(o.drain_seconds >= 0)) throw ConfigError("--drain-timeout-s must be at least 0");

  // Signals are taken by the main thread alone: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const auto load_start = std::chrono::steady_clock::now();
  LoadedModel loaded = load_model_file(o.model, o.tokenizer, ModelFileOptions{o.context_length});
  if (!loaded.tokenizer)
    throw ConfigError(
        fmt::format("{} has no tokenizer pagedkv can use ({}); pass --tokenizer", o.model, loaded.tokenizer_error));
  const Model& model = *loaded.model;
  const TextTokenizer& tokenizer = *loaded.tokenizer;
  o.engine.apply_threads();
  // The first request should not pay for reading the file (see weight_preload.h).
  if (o.preload_weights) cli::preload_model_weights(model, std::max(2, kernel_threads()));
  EngineConfig config = o.engine.to_config();
  config.max_model_len = o.max_model_len;
  config.record_block_usage = false;  // a server runs for days
  config.enable_kv_events = true;  // for routers: GET /kv_events
  LLMEngine engine(model, config);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  server::ServerMetrics metrics(o.served_model_name, engine.max_model_len());
  if (o.kv_events_capacity < 1) throw ConfigError("--kv-events-capacity must be at least 1");
  api::KVEventLog kv_events(o.kv_events_capacity);
  server::EngineService service(engine, metrics, {o.max_waiting, stream_interval, &kv_events});
  server::ServerOptions options;
  options.host = o.host;
  options.port = o.port;
  options.api_keys = o.api_keys;
  if (!o.api_key_file.empty())
    for (std::string& k : read_api_key_file(o.api_key_file)) options.api_keys.push_back(std::move(k));
  for (const std::string& k : options.api_keys)
    if (k.empty()) throw ConfigError("--api-key must not be empty");
  options.allowed_origins = o.allowed_origins;
  options.sse_ping_interval = seconds_option(o.sse_ping_interval_seconds, "--sse-ping-interval-s");
  options.request_timeout = seconds_option(o.request_timeout_seconds, "--request-timeout-s");
  options.admin_endpoints = !o.disable_admin_endpoints;
  options.max_body_bytes = parse_byte_size(o.max_body_bytes);
  options.http_threads = o.http_threads;
  options.kv_events = &kv_events;
  options.prefix_hashing = api::prefix_hashing_for(
      engine.manager().cache_config(), std::string(hash_algorithm_name(config.hash_algorithm)), config.hash_seed);
  server::ServedModel served;
  served.limits = {o.served_model_name, engine.max_model_len(), model.config().vocab_size};
  // llama2.c checkpoints end a story by starting the next (run.c stops on BOS); GGUF files name
  // their end-of-generation token.
  served.eos_token_id = loaded.is_gguf ? tokenizer.eos_id() : Tokenizer::kBos;
  if (loaded.is_gguf) served.end_of_generation_ids = tokenizer.end_of_generation_ids();  // EOT, EOM, <|im_end|>...
  served.chat_template = api::detect_chat_template(loaded.chat_template);
  const std::string template_source = model_template_source(o, loaded);
  served.model_template = load_model_template(o, template_source, tokenizer);
  // Tool calls are read in the syntax the model's own template writes them (the built-in
  // templates have none), unless --tool-call-parser names one.
  if (o.tool_call_parser != "auto") {
    served.tool_parser = api::make_tool_call_parser(o.tool_call_parser);
  } else if (served.model_template) {
    const std::string_view syntax = api::detect_tool_call_syntax(template_source);
    if (!syntax.empty()) served.tool_parser = api::make_tool_call_parser(syntax);
  }
  server::OpenAIServer http(options, service, tokenizer, served, metrics);
  const int port = http.bind();

  fmt::print("{}\n", engine.describe());
  fmt::print("Loaded in {:.2f} s (file, weights, repacking, KV cache)\n", load_seconds);
  fmt::print("Model: {} (served as '{}'), max_model_len {}, chat template {}\n", o.model, o.served_model_name,
             engine.max_model_len(),
             served.model_template
                 ? (o.chat_template.empty() ? std::string("the model's own (Jinja)") : o.chat_template)
                 : std::string(api::chat_template_name(served.chat_template)));
  fmt::print("Tool calls: {}\n", served.tool_parser ? fmt::format("parsed as '{}'", served.tool_parser->name())
                                                    : std::string("not parsed (no known syntax; --tool-call-parser)"));
  fmt::print("pagedkv serve: listening on http://{}:{}\n", o.host, port);
  std::fflush(stdout);

  std::atomic<bool> serving{true};
  std::thread serve_thread([&] {
    http.serve();
    serving = false;
  });
  int signal_number = 0;
  while (serving) {
    const timespec tick{0, 200'000'000};
    const int s = sigtimedwait(&signals, nullptr, &tick);
    if (s > 0) {
      signal_number = s;
      break;
    }
  }
  fmt::print("pagedkv serve: {}; draining for up to {} s\n",
             signal_number == 0 ? "the listener stopped" : strsignal(signal_number), o.drain_seconds);
  std::fflush(stdout);
  // New requests now get 503 (and /health says so); the listener stays open until every accepted
  // request has its whole answer written: closing it earlier would cut streamed responses off.
  service.begin_drain();
  auto finished = [&] { return service.idle() && http.open_streams() == 0; };
  auto wait_until = [&](std::chrono::steady_clock::time_point deadline) {
    while (!finished() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return finished();
  };
  const bool drained =
      wait_until(std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                        std::chrono::duration<double>(o.drain_seconds)));
  if (!drained) {
    service.abort_all();  // the rest still get a final (aborted) answer
    wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(5));  // a client that stopped reading is cut off
  }
  http.stop();
  serve_thread.join();
  service.stop();
  fmt::print("pagedkv serve: {}; {} steps\n",
             drained ? "all requests finished" : "requests left at the deadline were aborted", engine.stats().steps);
  std::fflush(stdout);
  return 0;  // the engine's destructor flushes the KV tiers
}

const CommandRegistration kServeCommand{Command{
    "serve", "an OpenAI-compatible HTTP server on the paged engine, with Prometheus metrics (docs/serve.md)",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<ServeOptions>();
      sub.add_option("--model,-m", o->model,
                     "llama2.c checkpoint or GGUF file (default: ../shared/models/stories260K.bin)");
      sub.add_option("--tokenizer,-z", o->tokenizer,
                     "llama2.c tok*.bin or a GGUF file's tokenizer (default: the GGUF model's own; tok512.bin for the "
                     "default model)");
      sub.add_option("--context-length", o->context_length,
                     "GGUF: replaces the file's context length (llama.cpp's n_ctx)");
      sub.add_option("--chat-template", o->chat_template,
                     "a Jinja chat template file replacing the model's own (tokenizer.chat_template)");
      sub.add_option("--bos-token", o->bos_token, "the chat template's bos_token (default: the vocabulary's BOS text)");
      sub.add_option("--eos-token", o->eos_token, "the chat template's eos_token (default: the vocabulary's EOS text)");
      sub.add_option("--tool-call-parser", o->tool_call_parser,
                     fmt::format("how the model writes tool calls ({}; auto: from the chat template)",
                                 api::tool_call_parser_names()))
          ->capture_default_str();
      sub.add_option("--served-model-name", o->served_model_name,
                     "the model name clients use (default: the file's stem)");
      sub.add_option("--host", o->host, "address to listen on")->capture_default_str();
      sub.add_option("--port", o->port, "port to listen on (0: any free port, printed at start)")
          ->capture_default_str();
      sub.add_option("--api-key", o->api_keys,
                     "require 'Authorization: Bearer KEY' on every endpoint but /health (the dashboard: open "
                     "/dashboard#key=KEY); repeat it for several keys, any of which works");
      sub.add_option("--api-key-file", o->api_key_file,
                     "more API keys, one a line ('#' starts a comment line); with --api-key, all of them work");
      sub.add_option("--allowed-origins", o->allowed_origins,
                     "CORS: origins browsers may call the API from, comma-separated or repeated ('*': any); "
                     "preflight requests are answered. Default: none (no CORS headers)")
          ->delimiter(',');
      sub.add_option("--sse-ping-interval-s", o->sse_ping_interval_seconds,
                     "a streamed response that has sent nothing for this long (queued, long prefill) gets an SSE "
                     "comment line ': ping' (0: never)")
          ->capture_default_str();
      sub.add_option("--request-timeout-s", o->request_timeout_seconds,
                     "a completion running longer is aborted and answered 408 (streamed: an error event, then "
                     "[DONE]); a request's own 'timeout' field may ask for less (0: no limit)")
          ->capture_default_str();
      sub.add_flag("--disable-admin-endpoints", o->disable_admin_endpoints, "answer /reset_prefix_cache with 403");
      sub.add_option("--max-body-bytes", o->max_body_bytes, "larger request bodies get 413")->capture_default_str();
      sub.add_option("--max-waiting", o->max_waiting, "queued prompts beyond which requests get 503 with Retry-After")
          ->capture_default_str();
      sub.add_option("--stream-interval", o->stream_interval,
                     "tokens a streamed choice gathers per chunk (1: every token; more: fewer wake-ups under load; "
                     "auto: every token while at most 8 choices run, beyond that as many as keep the hand-over to "
                     "the HTTP threads under 3 % of an engine step, at most 16)")
          ->capture_default_str();
      sub.add_option("--http-threads", o->http_threads, "HTTP worker threads (each open stream holds one)")
          ->capture_default_str();
      sub.add_option("--max-model-len", o->max_model_len, "longest prompt + output (0: the model's)")
          ->capture_default_str();
      sub.add_option("--drain-timeout-s,--drain-seconds", o->drain_seconds,
                     "on SIGTERM/SIGINT, time accepted requests get to finish")
          ->capture_default_str();
      sub.add_option("--kv-events-capacity", o->kv_events_capacity,
                     "KV events kept for routers (GET /kv_events); a router further behind reads a snapshot")
          ->capture_default_str();
      add_on_off_flag(sub, "--preload-weights", "--no-preload-weights", o->preload_weights,
                      "read every weight into memory before listening, so that the first request does not pay for "
                      "reading the model file (skipped when the weights exceed 90 % of the machine's memory)");
      o->engine.add_to(sub);
      return [o] { return run_serve(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
