#include "pagedkv/core/percentile.h"
#include "pagedkv/loadgen/serve_benchmark.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <iterator>
#include <memory>
#include <numeric>
#include <sstream>

#include "pagedkv/core/error.h"
#include "pagedkv/loadgen/arrival_process.h"
#include "pagedkv/loadgen/http_call.h"

namespace pagedkv::loadgen {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Plain English for /tokenize: the token pool random prompts draw from.
constexpr const char* kPoolText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
    "One day, she saw a big red ball under a tree. She wanted to play with it, but her mom said it was time to go "
    "home. Lily was sad, so her brother Tom gave her a hug and a cookie. They laughed and ran to the garden, where "
    "a happy dog jumped in the water and a small bird sang a song about the sun, the moon and the stars.";

json get_json(const std::string& base_url, const std::string& path, const std::string& api_key) {
  const HttpReply r = http_call("GET", base_url + path, "", api_key);
  if (r.status != 200) throw Error(fmt::format("bench serve: {}{} answered {}: {}", base_url, path, r.status, r.body));
  return json::parse(r.body);
}

constexpr const char* kTiers[] = {"device", "host", "disk", "remote"};

// The servers' prefix-cache counters, summed: hits and queries (tokens), then hit tokens by tier.
// Any server that does not answer makes the whole reading unknown (-1).
struct CacheCounters {
  double hits = -1, queries = -1;
  double by_tier[std::size(kTiers)] = {-1, -1, -1, -1};
};

CacheCounters cache_counters(const ServeBenchOptions& o) {
  CacheCounters sum{0, 0, {0, 0, 0, 0}};
  for (const std::string& url : o.base_urls) {
    try {
      const HttpReply r = http_call("GET", url + "/metrics", "", "", 10);
      if (r.status != 200) return {};
      const double hits = metric_value(r.body, "vllm:prefix_cache_hits_total");
      const double queries = metric_value(r.body, "vllm:prefix_cache_queries_total");
      if (hits < 0 || queries < 0) return {};
      sum.hits += hits;
      sum.queries += queries;
      for (size_t t = 0; t < std::size(kTiers); ++t) {
        const double v =
            metric_value(r.body, "pagedkv:prefix_cache_hit_tokens_total", fmt::format("tier=\"{}\"", kTiers[t]));
        sum.by_tier[t] = (v < 0 || sum.by_tier[t] < 0) ? -1 : sum.by_tier[t] + v;
      }
    } catch (const Error&) {
      return {};
    }
  }
  return sum;
}

struct RequestResult {
  bool ok = false;
  std::string error;
  int prompt_tokens = 0;
  int output_tokens = 0;
  int cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  size_t server = 0;  // index of the base URL it went to (the last attempt's)
  int retries = 0;  // attempts sent again elsewhere
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;
};

// One streamed completion in flight: its curl handle, and what its server-sent events said.
struct Transfer {
  size_t index = 0;
  // How a chunk that carries text starts its text: completions' "text", chat's "content".
  std::string_view text_key = "\"text\":", empty_text = "\"text\":\"\"";
  std::string body;
  std::string buffer;  // received bytes not yet split into events
  std::string error_body;
  Clock::time_point start, last;
  bool saw_first = false;
  bool saw_done = false;  // the stream's [DONE]
  RequestResult result;
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl{nullptr, curl_easy_cleanup};

  // Splits complete events off `buffer`. Most chunks carry one token's text and are recognised
  // without parsing, so the load generator (on the same machine as the server) spends little of
  // the CPU it measures; inside JSON strings quotes are escaped, so `"text":""` can only be an
  // empty text field.
  void consume(const char* data, size_t len) {
    buffer.append(data, len);
    size_t begin = 0;
    for (size_t end; (end = buffer.find("\n\n", begin)) != std::string::npos; begin = end + 2) {
      const std::string_view event(buffer.data() + begin, end - begin);
      if (event.substr(0, 6) != "data: ") {
        if (error_body.size() < 4096) error_body.append(event);  // an error response's body
        continue;
      }
      const std::string_view payload = event.substr(6);
      if (payload == "[DONE]") {
        saw_done = true;
        continue;
      }
      if (payload.find("\"usage\"") != std::string_view::npos || payload.find("\"error\"") != std::string_view::npos) {
        const json chunk = json::parse(payload, nullptr, false);
        if (chunk.is_discarded()) continue;
        if (chunk.contains("error")) result.error = chunk["error"].value("message", "error event");
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
          const json& usage = chunk["usage"];
          result.output_tokens = usage.value("completion_tokens", 0);
          if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object())
            result.cached_tokens = usage["prompt_tokens_details"].value("cached_tokens", 0);
        }
        continue;
      }
      if (payload.find(empty_text) != std::string_view::npos || payload.find(text_key) == std::string_view::npos)
        continue;
      const Clock::time_point now = Clock::now();
      if (!saw_first) {
        result.ttft_s = std::chrono::duration<double>(now - start).count();
        saw_first = true;
      } else {
        result.itl_s.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
    buffer.erase(0, begin);
  }
};

size_t on_data(char* data, size_t size, size_t n, void* transfer) {
  static_cast<Transfer*>(transfer)->consume(data, size * n);
  return size * n;
}

// Runs every request on curl's multi interface from this one thread: each is sent at its time
// (and when a concurrency slot is free), and all of them are read as their bytes arrive.
std::vector<RequestResult> run_transfers(const std::vector<BenchRequest>& requests, const std::vector<double>& times,
                                         const std::string& model, const ServeBenchOptions& o, double& duration_s) {
  std::unique_ptr<CURLM, decltype(&curl_multi_cleanup)> multi(curl_multi_init(), curl_multi_cleanup);
  if (!multi) throw Error("libcurl could not start its multi interface");
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!o.api_key.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + o.api_key).c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers, curl_slist_free_all);
  std::vector<std::string> urls;
  for (const std::string& base : o.base_urls) urls.push_back(base + o.endpoint);
  // Chat takes text: each prompt's, from the server that tokenized it, before the clock starts.
  const bool chat = o.endpoint == "/v1/chat/completions";
  std::vector<std::string> chat_texts;
  if (chat)
    for (const BenchRequest& req : requests) {
      const HttpReply r =
          http_call("POST", o.base_urls.front() + "/detokenize", json{{"tokens", req.prompt}}.dump(), o.api_key);
      if (r.status != 200)
        throw Error(fmt::format("bench serve: {}/detokenize answered {}: {}", o.base_urls.front(), r.status, r.body));
      chat_texts.push_back(json::parse(r.body).value("prompt", std::string()));
    }

  std::vector<RequestResult> results(requests.size());
  std::deque<Transfer> transfers;  // stable addresses: curl holds pointers to them
  // Starts (or starts again) a transfer's request to its server.
  auto start_request = [&](Transfer& t) {
    t.curl.reset(curl_easy_init());
    CURL* c = t.curl.get();
    curl_easy_setopt(c, CURLOPT_URL, urls[t.result.server].c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, t.body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(t.body.size()));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_PRIVATE, &t);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(o.timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_multi_add_handle(multi.get(), c);
  };
  size_t next = 0, running = 0, finished = 0;
  const Clock::time_point start = Clock::now();
  auto due = [&](size_t i) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(times[i]));
  };
  while (finished < requests.size()) {
    const Clock::time_point now = Clock::now();
    while (next < requests.size() && due(next) <= now &&
           (o.max_concurrency <= 0 || static_cast<int>(running) < o.max_concurrency)) {
      const BenchRequest& req = requests[next];
      Transfer& t = transfers.emplace_back();
      t.index = next++;
      t.result.prompt_tokens = static_cast<int>(req.prompt.size());
      t.result.server = t.index % urls.size();
      json body{{"model", model},
                {"max_tokens", req.max_tokens},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}},
                {"ignore_eos", o.ignore_eos},
                {"temperature", 0.0}};
      if (chat) {
        body["messages"] = json::array({{{"role", "user"}, {"content", chat_texts[t.index]}}});
        t.text_key = "\"content\":";
        t.empty_text = "\"content\":\"\"";
      } else {
        body["prompt"] = req.prompt;
      }
      t.body = body.dump();
      t.start = Clock::now();
      start_request(t);
      ++running;
    }
    int still = 0;
    curl_multi_perform(multi.get(), &still);
    int queued = 0;
    while (CURLMsg* m = curl_multi_info_read(multi.get(), &queued)) {
      if (m->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
      RequestResult& r = t->result;
      r.e2e_s = std::chrono::duration<double>(Clock::now() - t->start).count();
      long status = 0;
      curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      if (m->data.result != CURLE_OK) r.error = fmt::format("transfer failed: {}", curl_easy_strerror(m->data.result));
      else if (status != 200) r.error = fmt::format("HTTP {}: {}{}", status, t->error_body, t->buffer);
      else if (r.error.empty() && !t->saw_first) r.error = "no tokens received";
      else if (r.error.empty() && !t->saw_done) r.error = "the stream ended before [DONE]";
      r.ok = r.error.empty();
      curl_multi_remove_handle(multi.get(), m->easy_handle);
      // No whole answer, and not the request's fault (a 4xx): the next base URL gets it again.
      if (!r.ok && (status == 0 || status >= 500 || status == 200) && r.retries < o.failover && urls.size() > 1) {
        RequestResult again;
        again.prompt_tokens = r.prompt_tokens;
        again.server = (r.server + 1) % urls.size();
        again.retries = r.retries + 1;
        t->result = std::move(again);
        t->buffer.clear();
        t->error_body.clear();
        t->saw_first = t->saw_done = false;
        start_request(*t);
        continue;
      }
      results[t->index] = std::move(r);
      t->curl.reset();
      --running;
      ++finished;
    }
    // Sleep until data arrives or the next request is due (at most 100 ms).
    int wait_ms = 100;
    if (next < requests.size() && (o.max_concurrency <= 0 || static_cast<int>(running) < o.max_concurrency))
      wait_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(due(next) - Clock::now()).count(), 0, 100));
    if (finished < requests.size()) curl_multi_poll(multi.get(), nullptr, 0, wait_ms, nullptr);
  }
  duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  return results;
}

}  // namespace

std::string normalize_base_url(std::string url) {
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    throw ConfigError(fmt::format("--base-url must start with http:// or https://, got '{}'", url));
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

std::string endpoint_path(const std::string& name) {
  if (name == "completions" || name == "/v1/completions") return "/v1/completions";
  if (name == "chat" || name == "chat/completions" || name == "/v1/chat/completions") return "/v1/chat/completions";
  throw ConfigError(
      fmt::format("--endpoint must be completions or chat (/v1/completions, /v1/chat/completions), got '{}'", name));
}

double metric_value(const std::string& text, const std::string& name, const std::string& label) {
  std::istringstream in(text);
  double sum = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    const size_t space = line.rfind(' ');
    sum = std::max(sum, 0.0) + std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

LatencySummary summarize_ms(std::vector<double> seconds) {
  LatencySummary s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  auto at = [&](double p) { return 1e3 * percentile_of_sorted(seconds, p); };
  s.mean = 1e3 * std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  s.median = at(50);
  s.p99 = at(99);
  return s;
}

std::string fetch_model_name(const std::string& base_url, const std::string& api_key) {
  const json models = get_json(base_url, "/v1/models", api_key);
  if (!models.contains("data") || models["data"].empty())
    throw Error(fmt::format("bench serve: {} serves no model", base_url));
  return models["data"][0]["id"].get<std::string>();
}

int fetch_max_model_len(const std::string& base_url, const std::string& api_key) {
  const json models = get_json(base_url, "/v1/models", api_key);
  return models["data"][0].value("max_model_len", 2048);
}

TokenPool fetch_token_pool(const std::string& base_url, const std::string& api_key) {
  auto tokenize = [&](const char* text, bool special) {
    // vLLM's and pagedkv's fields, and llama-server's (content, add_special): each server reads its own.
    const json body{{"prompt", text}, {"add_special_tokens", special}, {"content", text}, {"add_special", special}};
    const HttpReply r = http_call("POST", base_url + "/tokenize", body.dump(), api_key);
    if (r.status != 200)
      throw Error(fmt::format("bench serve: {}/tokenize answered {}: {}", base_url, r.status, r.body));
    return json::parse(r.body)["tokens"].get<std::vector<TokenId>>();
  };
  TokenPool pool{tokenize(kPoolText, false), tokenize("", true)};
  std::sort(pool.ids.begin(), pool.ids.end());
  pool.ids.erase(std::unique(pool.ids.begin(), pool.ids.end()), pool.ids.end());
  return pool;
}

std::vector<double> send_times(const std::vector<BenchRequest>& requests, const ServeBenchOptions& o) {
  std::vector<double> times = arrival_times(static_cast<int>(requests.size()), o.request_rate, o.burstiness, o.seed);
  for (size_t i = 0; i < requests.size(); ++i)
    if (requests[i].arrival_s) times[i] = *requests[i].arrival_s;
  return times;
}

ServeBenchReport run_serve_benchmark(const std::vector<BenchRequest>& requests, const ServeBenchOptions& o) {
  ServeBenchReport report;
  if (o.base_urls.empty()) throw ConfigError("bench serve needs at least one --base-url");
  report.model = o.model.empty() ? fetch_model_name(o.base_urls.front(), o.api_key) : o.model;
  const std::vector<double> times = send_times(requests, o);
  const CacheCounters before = cache_counters(o);

  const std::vector<RequestResult> results = run_transfers(requests, times, report.model, o, report.duration_s);

  std::vector<double> ttft, tpot, itl, e2e;
  report.completed_by_server.assign(o.base_urls.size(), 0);
  for (const RequestResult& r : results) {
    report.e2e_ms_by_request.push_back(r.ok ? 1e3 * r.e2e_s : -1);
    report.retried += r.retries;
    if (!r.ok) {
      ++report.failed;
      if (report.errors.size() < 5) report.errors.push_back(r.error);
      continue;
    }
    ++report.completed;
    ++report.completed_by_server[r.server];
    report.total_cached_tokens += r.cached_tokens;
    report.total_input_tokens += r.prompt_tokens;
    report.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    if (r.output_tokens > 1) tpot.push_back((r.e2e_s - r.ttft_s) / (r.output_tokens - 1));
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  report.request_throughput = report.completed / report.duration_s;
  report.output_throughput = static_cast<double>(report.total_output_tokens) / report.duration_s;
  report.total_token_throughput =
      static_cast<double>(report.total_input_tokens + report.total_output_tokens) / report.duration_s;
  report.ttft = summarize_ms(ttft);
  report.tpot = summarize_ms(tpot);
  report.itl = summarize_ms(itl);
  report.e2e = summarize_ms(e2e);
  if (report.total_input_tokens > 0)
    report.cached_token_rate =
        static_cast<double>(report.total_cached_tokens) / static_cast<double>(report.total_input_tokens);
  const CacheCounters after = cache_counters(o);
  if (before.hits >= 0 && after.hits >= 0 && after.queries > before.queries)
    report.prefix_cache_hit_rate = (after.hits - before.hits) / (after.queries - before.queries);
  for (size_t t = 0; t < std::size(kTiers); ++t)
    if (before.by_tier[t] >= 0 && after.by_tier[t] >= 0)
      report.hit_tokens_by_tier.emplace_back(kTiers[t], after.by_tier[t] - before.by_tier[t]);
  return report;
}

json ServeBenchReport::to_json() const {
  auto summary = [](const LatencySummary& s) { return json{{"mean", s.mean}, {"median", s.median}, {"p99", s.p99}}; };
  json by_tier = json::object();
  for (const auto& [tier, tokens] : hit_tokens_by_tier) by_tier[tier] = tokens;
  return {{"model", model},
          {"completed", completed},
          {"failed", failed},
          {"retried", retried},
          {"errors", errors},
          {"duration_s", duration_s},
          {"total_input_tokens", total_input_tokens},
          {"total_output_tokens", total_output_tokens},
          {"request_throughput", request_throughput},
          {"output_throughput", output_throughput},
          {"total_token_throughput", total_token_throughput},
          {"ttft_ms", summary(ttft)},
          {"tpot_ms", summary(tpot)},
          {"itl_ms", summary(itl)},
          {"e2e_ms", summary(e2e)},
          {"prefix_cache_hit_rate", prefix_cache_hit_rate < 0 ? json(nullptr) : json(prefix_cache_hit_rate)},
          {"total_cached_tokens", total_cached_tokens},
          {"cached_token_rate", cached_token_rate},
          {"hit_tokens_by_tier", by_tier},
          {"completed_by_server", completed_by_server}};
}

std::string ServeBenchReport::to_text() const {
  std::string s;
  auto row = [&](const std::string& label, const std::string& value) {
    s += fmt::format("{:<40}{:>12}\n", label, value);
  };
  auto section = [&](const std::string& title) { s += fmt::format("{:-^52}\n", title); };
  auto latency = [&](const char* name, const char* title, const LatencySummary& l) {
    section(title);
    row(fmt::format("Mean {} (ms):", name), fmt::format("{:.2f}", l.mean));
    row(fmt::format("Median {} (ms):", name), fmt::format("{:.2f}", l.median));
    row(fmt::format("P99 {} (ms):", name), fmt::format("{:.2f}", l.p99));
  };
  s += fmt::format("{:=^52}\n", " Serving Benchmark Result ");
  row("Successful requests:", std::to_string(completed));
  row("Failed requests:", std::to_string(failed));
  if (retried > 0) row("Retried elsewhere:", std::to_string(retried));
  row("Benchmark duration (s):", fmt::format("{:.2f}", duration_s));
  row("Total input tokens:", std::to_string(total_input_tokens));
  row("Total generated tokens:", std::to_string(total_output_tokens));
  row("Request throughput (req/s):", fmt::format("{:.2f}", request_throughput));
  row("Output token throughput (tok/s):", fmt::format("{:.2f}", output_throughput));
  row("Total token throughput (tok/s):", fmt::format("{:.2f}", total_token_throughput));
  row("Prefix cache hit rate (server):",
      prefix_cache_hit_rate < 0 ? "n/a" : fmt::format("{:.1f}%", 100 * prefix_cache_hit_rate));
  row("Cached prompt tokens (responses):", fmt::format("{} ({:.1f}%)", total_cached_tokens, 100 * cached_token_rate));
  for (const auto& [tier, tokens] : hit_tokens_by_tier)
    if (tokens > 0) row(fmt::format("  hit tokens from {}:", tier), fmt::format("{:.0f}", tokens));
  if (completed_by_server.size() > 1) {
    std::string per;
    for (int c : completed_by_server) per += (per.empty() ? "" : " / ") + std::to_string(c);
    row("Completed per server:", per);
  }
  latency("TTFT", "Time to First Token", ttft);
  latency("TPOT", "Time per Output Token (excl. 1st token)", tpot);
  latency("ITL", "Inter-token Latency", itl);
  latency("E2EL", "End-to-end Latency", e2e);
  s += fmt::format("{:=^52}\n", "");
  for (const std::string& e : errors) s += "error: " + e + "\n";
  return s;
}

}  // namespace pagedkv::loadgen
