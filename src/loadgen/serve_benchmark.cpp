#include "pagedkv/loadgen/serve_benchmark.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include "pagedkv/core/error.h"
#include "pagedkv/loadgen/arrival_process.h"

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

httplib::Headers auth_headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

json get_json(const std::string& base_url, const std::string& path, const std::string& api_key) {
  httplib::Client client(base_url);
  client.set_connection_timeout(10);
  client.set_read_timeout(60);
  auto r = client.Get(path, auth_headers(api_key));
  if (!r) throw Error(fmt::format("bench serve: cannot reach {}{}: {}", base_url, path, httplib::to_string(r.error())));
  if (r->status != 200) throw Error(fmt::format("bench serve: {}{} answered {}: {}", base_url, path, r->status, r->body));
  return json::parse(r->body);
}

// Sum of the samples of `name` in a Prometheus text exposition (-1 if absent).
double metric_value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  double sum = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    const size_t space = line.rfind(' ');
    sum = std::max(sum, 0.0) + std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

std::pair<double, double> prefix_cache_counters(const ServeBenchOptions& o) {
  httplib::Client client(o.base_url);
  client.set_connection_timeout(10);
  auto r = client.Get("/metrics");
  if (!r || r->status != 200) return {-1, -1};
  return {metric_value(r->body, "vllm:prefix_cache_hits_total"), metric_value(r->body, "vllm:prefix_cache_queries_total")};
}

struct RequestResult {
  bool ok = false;
  std::string error;
  int prompt_tokens = 0;
  int output_tokens = 0;
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;
};

RequestResult send_one(const BenchRequest& req, const std::string& model, const ServeBenchOptions& o) {
  RequestResult res;
  res.prompt_tokens = static_cast<int>(req.prompt.size());
  const json body{{"model", model}, {"prompt", req.prompt}, {"max_tokens", req.max_tokens}, {"stream", true},
                  {"stream_options", {{"include_usage", true}}}, {"ignore_eos", o.ignore_eos}, {"temperature", 0.0}};
  httplib::Client client(o.base_url);
  client.set_connection_timeout(30);
  client.set_read_timeout(static_cast<time_t>(o.timeout_s));
  httplib::Request http;
  http.method = "POST";
  http.path = o.endpoint;
  http.headers = auth_headers(o.api_key);
  http.set_header("Content-Type", "application/json");
  http.body = body.dump();
  std::string buffer;
  bool saw_first = false;
  Clock::time_point last;
  const Clock::time_point start = Clock::now();
  http.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") continue;
      // Most chunks carry one token's text: recognised without parsing, so the load generator
      // (on the same machine as the server) spends little of the CPU it measures. Inside JSON
      // strings quotes are escaped, so `"text":""` can only be an empty text field.
      if (payload.find("\"usage\"") != std::string::npos || payload.find("\"error\"") != std::string::npos) {
        const json chunk = json::parse(payload, nullptr, false);
        if (chunk.is_discarded()) continue;
        if (chunk.contains("error")) res.error = chunk["error"].value("message", "error event");
        if (chunk.contains("usage") && chunk["usage"].is_object())
          res.output_tokens = chunk["usage"].value("completion_tokens", 0);
        continue;
      }
      if (payload.find("\"text\":\"\"") != std::string::npos || payload.find("\"text\":") == std::string::npos) continue;
      const Clock::time_point now = Clock::now();
      if (!saw_first) {
        res.ttft_s = std::chrono::duration<double>(now - start).count();
        saw_first = true;
      } else {
        res.itl_s.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
    return true;
  };
  auto r = client.send(http);
  res.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!r) res.error = "connection failed: " + httplib::to_string(r.error());
  else if (r->status != 200) res.error = fmt::format("HTTP {}: {}", r->status, buffer.empty() ? r->body : buffer);
  res.ok = res.error.empty() && saw_first;
  if (res.error.empty() && !saw_first) res.error = "no tokens received";
  return res;
}

}  // namespace

LatencySummary summarize_ms(std::vector<double> seconds) {
  LatencySummary s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  auto at = [&](double p) {  // linear interpolation between ranks, as numpy's percentile
    const double rank = p / 100.0 * static_cast<double>(seconds.size() - 1);
    const size_t lo = static_cast<size_t>(rank);
    const size_t hi = std::min(lo + 1, seconds.size() - 1);
    return 1e3 * (seconds[lo] + (seconds[hi] - seconds[lo]) * (rank - static_cast<double>(lo)));
  };
  s.mean = 1e3 * std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  s.median = at(50);
  s.p99 = at(99);
  return s;
}

std::string fetch_model_name(const std::string& base_url, const std::string& api_key) {
  const json models = get_json(base_url, "/v1/models", api_key);
  if (!models.contains("data") || models["data"].empty()) throw Error(fmt::format("bench serve: {} serves no model", base_url));
  return models["data"][0]["id"].get<std::string>();
}

int fetch_max_model_len(const std::string& base_url, const std::string& api_key) {
  const json models = get_json(base_url, "/v1/models", api_key);
  return models["data"][0].value("max_model_len", 2048);
}

std::vector<TokenId> fetch_token_pool(const std::string& base_url, const std::string& api_key) {
  httplib::Client client(base_url);
  client.set_connection_timeout(10);
  auto r = client.Post("/tokenize", auth_headers(api_key), json{{"prompt", kPoolText}, {"add_special_tokens", false}}.dump(),
                       "application/json");
  if (!r || r->status != 200) throw Error(fmt::format("bench serve: {}/tokenize failed", base_url));
  std::vector<TokenId> pool = json::parse(r->body)["tokens"].get<std::vector<TokenId>>();
  std::sort(pool.begin(), pool.end());
  pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
  return pool;
}

ServeBenchReport run_serve_benchmark(const std::vector<BenchRequest>& requests, const ServeBenchOptions& o) {
  ServeBenchReport report;
  report.model = o.model.empty() ? fetch_model_name(o.base_url, o.api_key) : o.model;
  const std::vector<double> times = arrival_times(static_cast<int>(requests.size()), o.request_rate, o.burstiness, o.seed);
  const auto [hits0, queries0] = prefix_cache_counters(o);

  std::vector<RequestResult> results(requests.size());
  std::mutex mutex;
  std::condition_variable slot_free;
  int in_flight = 0;
  std::vector<std::thread> threads;
  threads.reserve(requests.size());
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    const double at = requests[i].arrival_s.value_or(times[i]);
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
    if (o.max_concurrency > 0) {
      std::unique_lock lock(mutex);
      slot_free.wait(lock, [&] { return in_flight < o.max_concurrency; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      results[i] = send_one(requests[i], report.model, o);
      if (o.max_concurrency > 0) {
        {
          std::lock_guard lock(mutex);
          --in_flight;
        }
        slot_free.notify_one();
      }
    });
  }
  for (auto& t : threads) t.join();
  report.duration_s = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      ++report.failed;
      if (report.errors.size() < 5) report.errors.push_back(r.error);
      continue;
    }
    ++report.completed;
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
  const auto [hits1, queries1] = prefix_cache_counters(o);
  if (hits0 >= 0 && queries1 > queries0) report.prefix_cache_hit_rate = (hits1 - hits0) / (queries1 - queries0);
  return report;
}

json ServeBenchReport::to_json() const {
  auto summary = [](const LatencySummary& s) { return json{{"mean", s.mean}, {"median", s.median}, {"p99", s.p99}}; };
  return {{"model", model},
          {"completed", completed},
          {"failed", failed},
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
          {"prefix_cache_hit_rate", prefix_cache_hit_rate < 0 ? json(nullptr) : json(prefix_cache_hit_rate)}};
}

std::string ServeBenchReport::to_text() const {
  std::string s;
  auto row = [&](const std::string& label, const std::string& value) { s += fmt::format("{:<40}{:>12}\n", label, value); };
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
  row("Benchmark duration (s):", fmt::format("{:.2f}", duration_s));
  row("Total input tokens:", std::to_string(total_input_tokens));
  row("Total generated tokens:", std::to_string(total_output_tokens));
  row("Request throughput (req/s):", fmt::format("{:.2f}", request_throughput));
  row("Output token throughput (tok/s):", fmt::format("{:.2f}", output_throughput));
  row("Total token throughput (tok/s):", fmt::format("{:.2f}", total_token_throughput));
  row("Prefix cache hit rate (server):", prefix_cache_hit_rate < 0 ? "n/a" : fmt::format("{:.1f}%", 100 * prefix_cache_hit_rate));
  latency("TTFT", "Time to First Token", ttft);
  latency("TPOT", "Time per Output Token (excl. 1st token)", tpot);
  latency("ITL", "Inter-token Latency", itl);
  latency("E2EL", "End-to-end Latency", e2e);
  s += fmt::format("{:=^52}\n", "");
  for (const std::string& e : errors) s += "error: " + e + "\n";
  return s;
}

}  // namespace pagedkv::loadgen
