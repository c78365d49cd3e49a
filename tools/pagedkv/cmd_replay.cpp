// pagedkv replay: serving traces through the real KV-cache manager (docs/replay.md).
//   cache mode:   requests in order, no compute time; hit rates and evictions for a capacity,
//                 or a sweep of capacities and policies (table, --json, --csv, --plot).
//   cluster mode: N instances with their own caches and a router, against one global cache.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "pagedkv/block/eviction_policies.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/progress_bar.h"
#include "pagedkv/replay/cache_replay.h"
#include "pagedkv/replay/cluster_replay.h"
#include "pagedkv/replay/hit_rate_plot.h"
#include "pagedkv/replay/step_cost_model.h"
#include "pagedkv/replay/timed_replay.h"
#include "pagedkv/replay/timeline_plot.h"
#include "pagedkv/scheduler/scheduler_config.h"
#include "pagedkv/replay/trace_reader.h"

namespace pagedkv::cli {
namespace {

struct ReplayArgs {
  std::vector<std::string> traces;
  std::string mode = "cache";
  std::string format = "auto";
  bool lenient = false;
  int64_t limit = 0;
  int block_size = 16;
  std::string capacity_blocks;
  std::string capacity_tokens;
  std::string policy = "lru";
  std::string sweep;
  std::string unit = "blocks";
  std::string plot;
  std::string plot_title;
  std::vector<std::string> plot_marks;
  bool json = false;
  bool csv = false;
  bool no_progress = false;
  int jobs = 1;
  // cluster mode
  int instances = 10;
  std::string router = "round-robin";
  double balance = 0.2;
  double prefill_scale = 2.0;
  // Azure prefix model
  AzurePrefixModel azure;
  // timed mode
  int max_num_seqs = 64;
  int max_batched_tokens = 2048;
  std::string preemption = "recompute";
  int swap_blocks = 0;
  std::string cost_preset = "llama3-8b-h100";
  std::optional<double> step_overhead_ms, prefill_tps, prefill_attention_ms_per_mpair, decode_ms_per_seq,
      decode_attention_ms_per_ktoken, swap_ms_per_block;
  double time_scale = 1.0;
  double timeline_interval = 1.0;
  std::string timeline;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// "5859", "3M", "1e6", "2.5k", "inf": a count, or nullopt for infinite.
std::optional<int64_t> parse_count(std::string_view option, const std::string& text) {
  if (text == "inf" || text == "infinite" || text == "∞") return std::nullopt;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  double scale = 1;
  std::string_view rest = std::string_view(text).substr(used);
  if (rest == "k" || rest == "K") scale = 1e3;
  else if (rest == "M" || rest == "m") scale = 1e6;
  else if (rest == "G" || rest == "g") scale = 1e9;
  else if (!rest.empty()) used = 0;
  if (used == 0 || !(v * scale >= 1) || v * scale > 9e18)
    throw ConfigError(fmt::format("{}: '{}' is not a positive count (e.g. 5859, 3M, 1e6 or inf)", option, text));
  return static_cast<int64_t>(std::floor(v * scale));
}

// Capacity in blocks; tokens are rounded down to whole blocks.
int64_t to_blocks(std::optional<int64_t> count, bool tokens, int block_size, std::string_view option) {
  if (!count) return kInfiniteCapacity;
  const int64_t blocks = tokens ? *count / block_size : *count;
  if (blocks < 1)
    throw ConfigError(fmt::format("{}: {} tokens is less than one block of {}", option, *count, block_size));
  return blocks;
}

std::string capacity_text(int64_t blocks) { return blocks == kInfiniteCapacity ? "inf" : fmt::format("{}", blocks); }

nlohmann::json capacity_json(int64_t blocks) {
  return blocks == kInfiniteCapacity ? nlohmann::json(nullptr) : nlohmann::json(blocks);
}

nlohmann::json result_json(const CacheReplayResult& r) {
  // Rates per CPU second: on a shared machine wall time measures the neighbours.
  const double cpu = r.cpu_seconds > 0 ? r.cpu_seconds : r.seconds;
  const double mtokens_per_s = cpu > 0 ? static_cast<double>(r.hashed_tokens) / cpu / 1e6 : 0.0;
  const double mops_per_s = cpu > 0 ? static_cast<double>(r.block_ops) / cpu / 1e6 : 0.0;
  return {
      {"trace", r.trace},
      {"policy", r.policy},
      {"block_size", r.block_size},
      {"capacity_blocks", capacity_json(r.capacity_blocks)},
      {"capacity_tokens", r.infinite() ? nlohmann::json(nullptr) : nlohmann::json(r.capacity_blocks * r.block_size)},
      {"pool_blocks", r.pool_blocks},
      {"requests", r.requests},
      {"unserved_requests", r.unserved_requests},
      {"prompt_tokens", r.prompt_tokens},
      {"prompt_blocks", r.prompt_blocks},
      {"hit_blocks", r.hit_blocks},
      {"hit_tokens", r.hit_tokens()},
      {"block_hit_rate", r.block_hit_rate()},
      {"token_hit_rate", r.token_hit_rate()},
      {"request_hit_rate", r.request_hit_rate()},
      {"mean_request_hit_fraction", r.mean_request_hit_fraction()},
      {"evictions", r.evictions},
      {"evicted_blocks", r.evicted_blocks},
      {"allocated_blocks", r.allocated_blocks},
      {"cached_blocks", r.cached_blocks},
      {"hashed_tokens", r.hashed_tokens},
      {"block_ops", r.block_ops},
      {"seconds", r.seconds},
      {"cpu_seconds", r.cpu_seconds},
      {"hashed_tokens_per_second", mtokens_per_s * 1e6},
      {"block_ops_per_second", mops_per_s * 1e6}};
}

constexpr const char* kCsvHeader =
    "trace,policy,block_size,capacity_blocks,capacity_tokens,requests,prompt_blocks,hit_blocks,block_hit_rate,"
    "token_hit_rate,request_hit_rate,mean_request_hit_fraction,evictions,seconds,cpu_seconds";

std::string result_csv(const CacheReplayResult& r) {
  return fmt::format("{},{},{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{},{:.3f},{:.3f}", r.trace, r.policy,
                     r.block_size, capacity_text(r.capacity_blocks),
                     r.infinite() ? std::string("inf") : fmt::format("{}", r.capacity_blocks * r.block_size),
                     r.requests, r.prompt_blocks, r.hit_blocks, r.block_hit_rate(), r.token_hit_rate(),
                     r.request_hit_rate(), r.mean_request_hit_fraction(), r.evictions, r.seconds, r.cpu_seconds);
}

void print_table(const std::vector<CacheReplayResult>& runs) {
  fmt::print("{:<34} {:<12} {:>5} {:>12} {:>13} {:>8} {:>8} {:>8} {:>11} {:>7} {:>7}\n", "trace", "policy", "block",
             "capacity", "tokens", "block", "token", "request", "evictions", "wall", "cpu");
  fmt::print("{:<34} {:<12} {:>5} {:>12} {:>13} {:>8} {:>8} {:>8} {:>11} {:>7} {:>7}\n", "", "", "size", "(blocks)", "",
             "hit", "hit", "hit", "", "(s)", "(s)");
  for (const CacheReplayResult& r : runs) {
    fmt::print("{:<34} {:<12} {:>5} {:>12} {:>13} {:>8.4f} {:>8.4f} {:>8.4f} {:>11} {:>7.2f} {:>7.2f}\n", r.trace,
               r.policy, r.block_size, capacity_text(r.capacity_blocks),
               r.infinite() ? std::string("inf") : fmt::format("{}", r.capacity_blocks * r.block_size),
               r.block_hit_rate(), r.token_hit_rate(), r.request_hit_rate(), r.evictions, r.seconds, r.cpu_seconds);
  }
  for (const CacheReplayResult& r : runs)
    if (r.unserved_requests > 0)
      fmt::print("note: {} at {} blocks: {} prompts are larger than the whole cache and count as misses\n", r.trace,
                 capacity_text(r.capacity_blocks), r.unserved_requests);
}

// A one-line progress bar on stderr, redrawn in place; only when stderr is a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO)) {}
  ~ProgressBar() { finish(); }
  void set_label(std::string label) { label_ = std::move(label); }
  std::function<void(size_t, size_t)> callback() {
    if (!enabled_) return nullptr;
    return [this](size_t done, size_t total) { draw(done, total); };
  }
  void finish() {
    if (enabled_ && drawn_) fmt::print(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  void draw(size_t done, size_t total) {
    constexpr int kWidth = 30;
    const double f = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    fmt::print(stderr, "\r\033[K{} {} {:3.0f}% {}/{}", label_, progress_bar(f, kWidth), 100 * f, done, total);
    std::fflush(stderr);
    drawn_ = true;
  }
  bool enabled_;
  bool drawn_ = false;
  std::string label_;
};

std::vector<Trace> load_traces(const ReplayArgs& a) {
  TraceReadOptions ro;
  const auto format = parse_trace_format(a.format);
  if (!format)
    throw ConfigError(fmt::format("--format: unknown format '{}' (auto, mooncake, azure, tokens)", a.format));
  ro.format = *format;
  ro.lenient = a.lenient;
  ro.limit = a.limit;
  ro.azure = a.azure;
  std::vector<Trace> traces;
  for (const std::string& path : a.traces) {
    traces.push_back(read_trace(path, ro));
    if (traces.back().skipped_lines > 0)
      fmt::print(stderr, "pagedkv replay: {}: skipped {} bad lines (--lenient)\n", path, traces.back().skipped_lines);
    if (traces.back().size() == 0) throw FormatError(fmt::format("{}: no requests", path));
  }
  return traces;
}

int run_cache(const ReplayArgs& a) {
  if (a.block_size <= 0 || a.block_size > 4096)
    throw ConfigError(fmt::format("--block-size must be in [1, 4096], got {}", a.block_size));
  const std::vector<std::string> policies = split_list(a.policy);
  if (policies.empty()) throw ConfigError("--policy: give at least one policy");
  for (const std::string& p : policies) make_eviction_policy(p);  // validates the name early

  // Capacities in blocks: --sweep (in --unit), or the single --capacity-*.
  std::vector<int64_t> capacities;
  if (!a.sweep.empty()) {
    if (a.unit != "blocks" && a.unit != "tokens")
      throw ConfigError(fmt::format("--unit must be blocks or tokens, got '{}'", a.unit));
    for (const std::string& item : split_list(a.sweep))
      capacities.push_back(to_blocks(parse_count("--sweep", item), a.unit == "tokens", a.block_size, "--sweep"));
  } else if (!a.capacity_blocks.empty()) {
    capacities.push_back(
        to_blocks(parse_count("--capacity-blocks", a.capacity_blocks), false, a.block_size, "--capacity-blocks"));
  } else if (!a.capacity_tokens.empty()) {
    capacities.push_back(
        to_blocks(parse_count("--capacity-tokens", a.capacity_tokens), true, a.block_size, "--capacity-tokens"));
  } else {
    throw ConfigError("give a capacity: --capacity-blocks N, --capacity-tokens N or --sweep c1,c2,...");
  }
  const std::vector<Trace> traces = load_traces(a);
  for (const Trace& t : traces)
    if (t.format == TraceFormat::kMooncake && kMooncakeBlockTokens % a.block_size != 0)
      fmt::print(stderr,
                 "pagedkv replay: warning: block size {} does not divide the trace's 512-token blocks; "
                 "sharing no longer lines up with hash ids\n",
                 a.block_size);

  // Every (trace, policy, capacity) is an independent replay; --jobs runs several at once.
  struct Job {
    const Trace* trace;
    std::string policy;
    int64_t capacity;
  };
  std::vector<Job> jobs;
  for (const Trace& trace : traces)
    for (const std::string& policy : policies)
      for (int64_t cap : capacities) jobs.push_back(Job{&trace, policy, cap});
  std::vector<CacheReplayResult> runs(jobs.size());
  ProgressBar bar(!a.no_progress);
  auto config_for = [&](const Job& job) {
    CacheReplayConfig c;
    c.block_size = a.block_size;
    c.capacity_blocks = job.capacity;
    c.policy = job.policy;
    return c;
  };
  if (a.jobs <= 1 || jobs.size() == 1) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      bar.set_label(fmt::format("{} {} {}", jobs[i].trace->name, jobs[i].policy, capacity_text(jobs[i].capacity)));
      CacheReplayConfig c = config_for(jobs[i]);
      c.progress = bar.callback();
      runs[i] = replay_cache(*jobs[i].trace, c);
      bar.finish();
    }
  } else {
    std::atomic<size_t> next{0}, done{0};
    std::mutex progress_mutex;
    auto progress = bar.callback();
    bar.set_label("replays");
    std::exception_ptr failure;
    auto worker = [&] {
      for (size_t i = next++; i < jobs.size(); i = next++) {
        try {
          runs[i] = replay_cache(*jobs[i].trace, config_for(jobs[i]));
        } catch (...) {
          std::lock_guard lock(progress_mutex);
          if (!failure) failure = std::current_exception();
        }
        std::lock_guard lock(progress_mutex);
        if (progress) progress(++done, jobs.size());
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::min<int>(a.jobs, static_cast<int>(jobs.size())); ++t) threads.emplace_back(worker);
    for (std::thread& t : threads) t.join();
    bar.finish();
    if (failure) std::rethrow_exception(failure);
  }
  if (a.json) {
    if (runs.size() == 1) fmt::print("{}\n", result_json(runs.front()).dump(2));
    else {
      nlohmann::json all = nlohmann::json::array();
      for (const auto& r : runs) all.push_back(result_json(r));
      fmt::print("{}\n", nlohmann::json{{"runs", all}}.dump(2));
    }
  } else if (a.csv) {
    fmt::print("{}\n", kCsvHeader);
    for (const auto& r : runs) fmt::print("{}\n", result_csv(r));
  } else {
    print_table(runs);
  }
  if (!a.plot.empty()) {
    HitRatePlotOptions po;
    po.title = a.plot_title;
    po.x_in_tokens = a.unit == "tokens" || !a.capacity_tokens.empty();
    for (const std::string& mark : a.plot_marks) {
      const size_t colon = mark.find(':');
      const auto x = parse_count("--plot-mark", mark.substr(0, colon));
      if (!x) throw ConfigError("--plot-mark: the position must be finite");
      po.marks_x.push_back(static_cast<double>(*x));
      po.marks_label.push_back(colon == std::string::npos ? std::string() : mark.substr(colon + 1));
    }
    write_hit_rate_plot(runs, a.plot, po);
    fmt::print(stderr, "pagedkv replay: wrote {}\n", a.plot);
  }
  return 0;
}

int run_cluster(const ReplayArgs& a) {
  const auto router = parse_router(a.router);
  if (!router) throw ConfigError(fmt::format("--router: unknown router '{}' (round-robin, cache-aware, kv)", a.router));
  int64_t per_instance = 0;
  if (!a.capacity_blocks.empty())
    per_instance =
        to_blocks(parse_count("--capacity-blocks", a.capacity_blocks), false, a.block_size, "--capacity-blocks");
  else if (!a.capacity_tokens.empty())
    per_instance =
        to_blocks(parse_count("--capacity-tokens", a.capacity_tokens), true, a.block_size, "--capacity-tokens");
  else throw ConfigError("cluster mode needs the per-instance capacity: --capacity-blocks N or --capacity-tokens N");
  if (per_instance == kInfiniteCapacity) throw ConfigError("cluster mode needs a finite per-instance capacity");
  if (!a.sweep.empty()) throw ConfigError("--sweep applies to --mode cache only");
  const std::vector<Trace> traces = load_traces(a);
  ProgressBar bar(!a.no_progress);
  nlohmann::json all = nlohmann::json::array();
  if (!a.json && !a.csv)
    fmt::print("{:<34} {:>9} {:<12} {:>14} {:>10} {:>10} {:>7} {:>13} {:>13} {:>7}\n", "trace", "instances", "router",
               "tokens/inst", "local hit", "global hit", "ratio", "prefill/req", "prefill/req", "ratio");
  if (!a.json && !a.csv)
    fmt::print("{:<34} {:>9} {:<12} {:>14} {:>10} {:>10} {:>7} {:>13} {:>13} {:>7}\n", "", "", "", "", "(token)",
               "(token)", "", "local", "global", "");
  if (a.csv)
    fmt::print(
        "trace,instances,router,capacity_tokens_per_instance,local_token_hit_rate,global_token_hit_rate,local_prefill_"
        "tokens_per_request,global_prefill_tokens_per_request\n");
  for (const Trace& trace : traces) {
    for (const std::string& policy : split_list(a.policy)) {
      ClusterReplayConfig c;
      c.block_size = a.block_size;
      c.capacity_blocks_per_instance = per_instance;
      c.instances = a.instances;
      c.router = *router;
      c.policy = policy;
      c.balance_slack = a.balance;
      c.prefill_scale = a.prefill_scale;
      bar.set_label(fmt::format("{} {}x{}", trace.name, a.instances, per_instance));
      c.progress = bar.callback();
      const ClusterReplayResult r = replay_cluster(trace, c);
      bar.finish();
      const CacheReplayResult& g = *r.global;
      const double local_prefill = ClusterReplayResult::prefill_tokens_per_request(r.local);
      const double global_prefill = ClusterReplayResult::prefill_tokens_per_request(g);
      if (a.json) {
        nlohmann::json per = nlohmann::json::array();
        for (const InstanceTotals& t : r.per_instance)
          per.push_back({{"requests", t.requests},
                         {"prompt_tokens", t.prompt_tokens},
                         {"hit_blocks", t.hit_blocks},
                         {"evictions", t.evictions}});
        all.push_back(
            {{"trace", trace.name},
             {"instances", a.instances},
             {"router", router_name(*router)},
             {"balance_slack", a.balance},
             {"capacity_blocks_per_instance", per_instance},
             {"capacity_tokens_per_instance", per_instance * a.block_size},
             {"local", result_json(r.local)},
             {"global", result_json(g)},
             {"hit_rate_ratio", r.local.token_hit_rate() > 0 ? g.token_hit_rate() / r.local.token_hit_rate() : 0.0},
             {"local_prefill_tokens_per_request", local_prefill},
             {"global_prefill_tokens_per_request", global_prefill},
             {"per_instance", per}});
      } else if (a.csv) {
        fmt::print("{},{},{},{},{:.6f},{:.6f},{:.1f},{:.1f}\n", trace.name, a.instances, router_name(*router),
                   per_instance * a.block_size, r.local.token_hit_rate(), g.token_hit_rate(), local_prefill,
                   global_prefill);
      } else {
        fmt::print("{:<34} {:>9} {:<12} {:>14} {:>10.4f} {:>10.4f} {:>6.2f}x {:>13.0f} {:>13.0f} {:>6.2f}x\n",
                   trace.name, a.instances, router_name(*router), per_instance * a.block_size, r.local.token_hit_rate(),
                   g.token_hit_rate(),
                   r.local.token_hit_rate() > 0 ? g.token_hit_rate() / r.local.token_hit_rate() : 0.0, local_prefill,
                   global_prefill, local_prefill > 0 ? global_prefill / local_prefill : 0.0);
      }
    }
  }
  if (a.json) fmt::print("{}\n", all.size() == 1 ? all.front().dump(2) : nlohmann::json{{"runs", all}}.dump(2));
  return 0;
}

nlohmann::json latency_json(const LatencySummary& l) {
  return {{"count", l.count}, {"mean_s", l.mean}, {"p50_s", l.p50},
          {"p90_s", l.p90},   {"p99_s", l.p99},   {"max_s", l.max}};
}

int run_timed(const ReplayArgs& a) {
  int64_t capacity = 0;
  if (!a.capacity_blocks.empty())
    capacity = to_blocks(parse_count("--capacity-blocks", a.capacity_blocks), false, a.block_size, "--capacity-blocks");
  else if (!a.capacity_tokens.empty())
    capacity = to_blocks(parse_count("--capacity-tokens", a.capacity_tokens), true, a.block_size, "--capacity-tokens");
  else throw ConfigError("timed mode needs the cache capacity: --capacity-blocks N or --capacity-tokens N");
  if (capacity == kInfiniteCapacity) throw ConfigError("timed mode needs a finite capacity (a real pool)");
  if (!a.sweep.empty()) throw ConfigError("--sweep applies to --mode cache only");
  TimedReplayConfig c;
  c.block_size = a.block_size;
  c.capacity_blocks = capacity;
  c.policy = a.policy;
  c.scheduler.max_num_seqs = a.max_num_seqs;
  c.scheduler.max_num_batched_tokens = a.max_batched_tokens;
  if (a.preemption == "recompute") c.scheduler.preemption_mode = PreemptionMode::kRecompute;
  else if (a.preemption == "swap") c.scheduler.preemption_mode = PreemptionMode::kSwap;
  else if (a.preemption == "auto") c.scheduler.preemption_mode = PreemptionMode::kAuto;
  else throw ConfigError(fmt::format("--preemption must be recompute, swap or auto, got '{}'", a.preemption));
  c.swap_blocks = a.swap_blocks;
  c.cost = step_cost_preset(a.cost_preset);
  auto override = [&](const std::optional<double>& v, double& field) {
    if (v) {
      field = *v;
      c.cost.name = a.cost_preset + " (modified)";
    }
  };
  override(a.step_overhead_ms, c.cost.step_overhead_ms);
  override(a.prefill_tps, c.cost.prefill_tokens_per_s);
  override(a.prefill_attention_ms_per_mpair, c.cost.prefill_attention_ms_per_mpair);
  override(a.decode_ms_per_seq, c.cost.decode_ms_per_seq);
  override(a.decode_attention_ms_per_ktoken, c.cost.decode_attention_ms_per_ktoken);
  override(a.swap_ms_per_block, c.cost.swap_ms_per_block);
  c.time_scale = a.time_scale;
  c.timeline_interval_s = a.timeline_interval;
  const std::vector<Trace> traces = load_traces(a);
  if (traces.size() != 1) throw ConfigError("timed mode replays one trace at a time");
  ProgressBar bar(!a.no_progress);
  bar.set_label(fmt::format("{} timed", traces.front().name));
  c.progress = bar.callback();
  const TimedReplayResult r = replay_timed(traces.front(), c);
  bar.finish();

  if (!a.timeline.empty()) {
    std::ofstream out(a.timeline);
    if (!out) throw Error(fmt::format("cannot write {}", a.timeline));
    out << "time_s,pool_usage,running,waiting,swapped,finished,hit_rate\n";
    for (const TimelinePoint& p : r.timeline)
      out << fmt::format("{:.3f},{:.4f},{},{},{},{},{:.4f}\n", p.time_s, p.pool_usage, p.running, p.waiting, p.swapped,
                         p.finished, p.hit_rate);
  }
  if (a.json) {
    const auto& m = c.cost;
    fmt::print("{}\n", nlohmann::json{{"trace", r.trace},
                                      {"block_size", a.block_size},
                                      {"capacity_blocks", capacity},
                                      {"policy", a.policy},
                                      {"cost_model",
                                       {{"name", m.name},
                                        {"step_overhead_ms", m.step_overhead_ms},
                                        {"prefill_tokens_per_s", m.prefill_tokens_per_s},
                                        {"prefill_attention_ms_per_mpair", m.prefill_attention_ms_per_mpair},
                                        {"decode_ms_per_seq", m.decode_ms_per_seq},
                                        {"decode_attention_ms_per_ktoken", m.decode_attention_ms_per_ktoken},
                                        {"swap_ms_per_block", m.swap_ms_per_block},
                                        {"overlap_weight_read", m.overlap_weight_read}}},
                                      {"max_num_seqs", a.max_num_seqs},
                                      {"max_num_batched_tokens", a.max_batched_tokens},
                                      {"requests", r.requests},
                                      {"finished", r.finished},
                                      {"rejected", r.rejected},
                                      {"duration_s", r.duration_s},
                                      {"steps", r.steps},
                                      {"token_hit_rate", r.hit_rate()},
                                      {"prompt_tokens", r.prompt_tokens},
                                      {"hit_tokens", r.hit_tokens},
                                      {"prefill_tokens", r.prefill_tokens},
                                      {"output_tokens", r.output_tokens},
                                      {"preemptions_recompute", r.preemptions_recompute},
                                      {"preemptions_swap", r.preemptions_swap},
                                      {"max_pool_usage", r.max_pool_usage},
                                      {"ttft", latency_json(r.ttft)},
                                      {"tpot", latency_json(r.tpot)},
                                      {"queueing", latency_json(r.queueing)},
                                      {"e2e", latency_json(r.e2e)},
                                      {"cpu_seconds", r.cpu_seconds}}
                           .dump(2));
  } else {
    fmt::print("{}: {} requests ({} rejected as larger than the cache), {} finished in {:.1f} s simulated, {} steps\n",
               r.trace, r.requests, r.rejected, r.finished, r.duration_s, r.steps);
    fmt::print("cost model {}; pool {} blocks of {} tokens; max {} sequences, {} tokens per step\n", c.cost.name,
               capacity, a.block_size, a.max_num_seqs, a.max_batched_tokens);
    fmt::print("prefix-cache token hit rate {:.4f}; prefill tokens computed {} (prompts {}); output tokens {}\n",
               r.hit_rate(), r.prefill_tokens, r.prompt_tokens, r.output_tokens);
    fmt::print("preemptions: {} recompute, {} swap; peak pool usage {:.1f}%\n", r.preemptions_recompute,
               r.preemptions_swap, 100 * r.max_pool_usage);
    fmt::print("{:<24} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "latency (s)", "mean", "p50", "p90", "p99", "max");
    for (const auto& [name, l] : {std::pair{"time to first token", r.ttft}, std::pair{"time per output token", r.tpot},
                                  std::pair{"queueing delay", r.queueing}, std::pair{"end to end", r.e2e}})
      fmt::print("{:<24} {:>10.4f} {:>10.4f} {:>10.4f} {:>10.4f} {:>10.4f}\n", name, l.mean, l.p50, l.p90, l.p99,
                 l.max);
  }
  if (!a.plot.empty()) {
    write_timeline_plot(r, a.plot, a.plot_title);
    fmt::print(stderr, "pagedkv replay: wrote {}\n", a.plot);
  }
  return 0;
}

const CommandRegistration kReplay{Command{
    "replay", "replay serving traces (Mooncake JSONL, Azure CSV, token JSONL) through the KV-cache manager",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<ReplayArgs>();
      sub.add_option("trace", a->traces, "trace files (several: one curve each)")->required()->check(CLI::ExistingFile);
      sub.add_option("--mode", a->mode,
                     "cache (cache-only, in order), cluster (instances vs a global pool), "
                     "timed (arrivals, the engine's scheduler, a step-time cost model)")
          ->check(CLI::IsMember({"cache", "cluster", "timed"}))
          ->capture_default_str();
      sub.add_option("--format", a->format, "auto, mooncake, azure or tokens")->capture_default_str();
      sub.add_flag("--lenient", a->lenient, "skip malformed lines (counted) instead of failing");
      sub.add_option("--limit", a->limit, "replay only the first N requests");
      sub.add_option("--block-size", a->block_size, "tokens per block (must divide 512 for Mooncake traces)")
          ->capture_default_str();
      auto* cb =
          sub.add_option("--capacity-blocks", a->capacity_blocks, "cache capacity in blocks (3M, 1e6, inf accepted)");
      auto* ct =
          sub.add_option("--capacity-tokens", a->capacity_tokens, "cache capacity in tokens, rounded down to blocks");
      cb->excludes(ct);
      sub.add_option("--policy", a->policy, "eviction policy: lru, lfu, s3fifo, length-aware (comma list: compare)")
          ->capture_default_str();
      sub.add_option("--sweep", a->sweep, "comma list of capacities to run (in --unit)")->excludes(cb)->excludes(ct);
      sub.add_option("--unit", a->unit, "unit of --sweep values: blocks or tokens")->capture_default_str();
      sub.add_option("--plot", a->plot,
                     "write a plot to this .svg or .png (gnuplot): hit rate vs capacity (cache), pool usage and queues "
                     "over time (timed)");
      sub.add_option("--plot-title", a->plot_title, "plot title");
      sub.add_option("--plot-mark", a->plot_marks,
                     "vertical reference line X[:label] (x in the plot's unit); repeatable");
      sub.add_flag("--json", a->json, "print JSON");
      sub.add_flag("--csv", a->csv, "print CSV");
      sub.add_option("--jobs,-j", a->jobs, "cache mode: replays to run at once (each holds its own pool)")
          ->check(CLI::Range(1, 256))
          ->capture_default_str();
      sub.add_flag("--no-progress", a->no_progress, "no progress bar (it is only drawn on a terminal anyway)");
      sub.add_option("--instances", a->instances, "cluster: number of instances")->capture_default_str();
      sub.add_option("--router", a->router,
                     "cluster: round-robin, cache-aware, or kv (pagedkv router's cost rule; its load term needs the "
                     "trace's latency_ms, as bench serve --save-requests writes)")
          ->capture_default_str();
      sub.add_option("--prefill-scale", a->prefill_scale, "cluster, kv: as pagedkv router's --prefill-scale")
          ->capture_default_str();
      sub.add_option("--balance", a->balance,
                     "cluster, cache-aware: an instance is eligible while its routed tokens are at most (1 + this) "
                     "times the mean")
          ->capture_default_str();
      sub.add_option("--azure-prompts", a->azure.num_system_prompts, "Azure: shared system prompts")
          ->capture_default_str();
      sub.add_option("--azure-zipf", a->azure.zipf_exponent, "Azure: Zipf exponent of prompt popularity")
          ->capture_default_str();
      sub.add_option("--azure-prompt-min", a->azure.min_prompt_tokens, "Azure: shortest shared prompt (tokens)")
          ->capture_default_str();
      sub.add_option("--azure-prompt-max", a->azure.max_prompt_tokens, "Azure: longest shared prompt (tokens)")
          ->capture_default_str();
      sub.add_option("--azure-share", a->azure.share_probability,
                     "Azure: probability a request starts with a shared prompt")
          ->capture_default_str();
      sub.add_option("--seed", a->azure.seed, "Azure: seed of the sharing model")->capture_default_str();
      sub.add_option("--max-num-seqs", a->max_num_seqs, "timed: requests running at once")->capture_default_str();
      sub.add_option("--max-num-batched-tokens,--max-batched-tokens", a->max_batched_tokens,
                     "timed: token budget per step (chunked prefill)")
          ->capture_default_str();
      sub.add_option("--preemption", a->preemption, "timed: recompute, swap or auto")->capture_default_str();
      sub.add_option("--swap-blocks", a->swap_blocks, "timed: host swap-space blocks")->capture_default_str();
      std::string presets;
      for (const StepCostModel& m : step_cost_presets()) presets += "\n  " + m.name + ": " + m.description;
      sub.add_option("--cost-preset", a->cost_preset, "timed: step-time cost model preset:" + presets)
          ->capture_default_str();
      sub.add_option("--step-overhead-ms", a->step_overhead_ms, "timed: fixed time per forward pass (ms)");
      sub.add_option("--prefill-tps", a->prefill_tps, "timed: prefill throughput (tokens/s)");
      sub.add_option("--prefill-attn-ms-per-mpair", a->prefill_attention_ms_per_mpair,
                     "timed: prefill attention, ms per million (token, context) pairs");
      sub.add_option("--decode-ms-per-seq", a->decode_ms_per_seq, "timed: decode cost per sequence (ms)");
      sub.add_option("--decode-attn-ms-per-ktoken", a->decode_attention_ms_per_ktoken,
                     "timed: decode attention, ms per 1000 context tokens read");
      sub.add_option("--swap-ms-per-block", a->swap_ms_per_block, "timed: device<->host copy per block (ms)");
      sub.add_option("--time-scale", a->time_scale, "timed: multiply arrival times (2 = half the request rate)")
          ->capture_default_str();
      sub.add_option("--timeline", a->timeline, "timed: write the pool/queue time series to this CSV");
      sub.add_option("--timeline-interval-s,--timeline-interval", a->timeline_interval,
                     "timed: seconds between time-series points")
          ->capture_default_str();
      return [a]() -> int {
        if (a->json && a->csv) throw ConfigError("choose one of --json and --csv");
        if (a->mode == "timed") return run_timed(*a);
        if (a->mode == "cluster") return run_cluster(*a);
        return run_cache(*a);
      };
    }}};

}  // namespace
}  // namespace pagedkv::cli
