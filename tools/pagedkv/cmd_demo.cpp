// pagedkv demo: the project's main job. Serves a deterministic workload (many requests of mixed
// lengths, most behind a few shared system prompts, some with parallel samples, some cancelled
// mid-flight) through the paged engine on a pool small enough that requests get preempted, and
// reports what paging did: throughput, latency, prefix-cache hits, blocks in use over time, the
// memory a contiguous per-request reservation would have needed, preemptions by mode and
// copy-on-write copies. --show-blocks draws the pool while it runs; --snapshot writes it as SVG
// or HTML. Arrivals and cancellations are counted in steps, so the schedule (and every count in
// the report) is the same on every run; only the timings vary.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "command.h"
#include "engine_options.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/percentile.h"
#include "pagedkv/core/progress_bar.h"
#include "pagedkv/demo/demo_render.h"
#include "pagedkv/demo/demo_workload.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/random_model.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv::cli {
namespace {

using demo::block_chart;
using demo::block_grid_legend;
using demo::BlockState;
using demo::DemoRequest;
using demo::DemoWorkloadConfig;
using demo::make_demo_workload;
using demo::PoolSnapshot;
using demo::render_block_grid;
using demo::render_block_html;
using demo::render_block_svg;
using demo::snapshot_pool;
using demo::sparkline;

using Clock = std::chrono::steady_clock;

constexpr uint64_t kBuiltinModelSeed = 7;
constexpr double kDefaultPoolSequences = 1.25;  // default pool, in maximum-length sequences

struct DemoOptions {
  std::string model, tokenizer;
  int requests = 320;
  uint64_t seed = 1;
  int system_prompts = 3;
  double parallel_fraction = 0.1;
  double cancel_fraction = 0.08;
  double arrival_rate = 0.1;
  bool show_blocks = false;
  std::string snapshot;
  int snapshot_step = -1;  // -1: the step of peak usage
  int columns = 64;
  bool json = false;
  EngineOptions engine;
};

// Per-step history the report is drawn from.
struct StepSample {
  int blocks_in_use = 0;
  int running = 0;
};

struct DemoRun {
  std::vector<DemoRequest> workload;
  std::vector<RequestOutput> finished;  // every finished output, samples included
  std::vector<StepSample> steps;
  PoolSnapshot pool;  // the pool drawn in the report and the snapshot
  std::string pool_moment;  // "peak usage" or "step N"
  int cancelled = 0;  // cancellations that aborted something
  double wall_seconds = 0;
};

// FNV-1a over every output's tokens, in request-id order: equal digests mean equal generations.
uint64_t output_digest(std::vector<const RequestOutput*> outs) {
  std::sort(outs.begin(), outs.end(), [](auto* a, auto* b) { return a->id.value < b->id.value; });
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  for (const RequestOutput* o : outs) {
    mix(o->id.value);
    for (TokenId t : o->output) mix(static_cast<uint64_t>(static_cast<uint32_t>(t)));
  }
  return h;
}

// Progress on stderr: a redrawn bar on a terminal, a line at every fifth of the work otherwise.
class Progress {
 public:
  Progress(int total, bool enabled) : total_(total), tty_(enabled && isatty(STDERR_FILENO) != 0), enabled_(enabled) {}
  void update(int done, int step, double tokens_per_s, double pool_usage, uint64_t preemptions) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (tty_) {
      if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
      last_ = now;
      fmt::print(stderr, "\r{} {:>4}/{} requests  step {:>5}  {:>7.0f} tok/s  pool {:>3.0f}%  {} preemptions\x1b[K",
                 progress_bar(static_cast<double>(done) / total_, 24), done, total_, step, tokens_per_s,
                 100 * pool_usage, preemptions);
      drawn_ = true;
    } else {
      const int fifth = done * 5 / std::max(1, total_);
      if (fifth <= last_fifth_) return;
      last_fifth_ = fifth;
      fmt::print(stderr,
                 "demo: {:>3}% ({}/{} requests done), step {}, {:.0f} tok/s, pool {:.0f}% used, {} preemptions\n",
                 100 * done / total_, done, total_, step, tokens_per_s, 100 * pool_usage, preemptions);
    }
  }
  void finish() {
    if (drawn_) fmt::print(stderr, "\n");
    drawn_ = false;
  }

 private:
  int total_;
  bool tty_, enabled_;
  bool drawn_ = false;
  int last_fifth_ = 0;
  Clock::time_point last_{};
};

// The live pool grid on a terminal stdout: redrawn in place at most ten times a second.
class LiveGrid {
 public:
  explicit LiveGrid(int columns) : columns_(columns) {}
  bool due(bool force) const { return force || Clock::now() - last_ >= std::chrono::milliseconds(100); }
  void draw(const PoolSnapshot& pool, const std::string& status) {
    last_ = Clock::now();
    std::string text = status + "\n" + render_block_grid(pool, columns_, true) + block_grid_legend(true) + "\n";
    std::string out;
    if (lines_ > 0) out += fmt::format("\x1b[{}F\x1b[J", lines_);  // back to the first line, clear below
    else out += "\x1b[?25l";  // hide the cursor while redrawing
    out += text;
    lines_ = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    fmt::print("{}", out);
    std::fflush(stdout);
  }
  void finish() {
    if (lines_ > 0) fmt::print("\x1b[?25h\n");
    std::fflush(stdout);
  }

 private:
  int columns_;
  int lines_ = 0;
  Clock::time_point last_{};
};

DemoRun run_workload(LLMEngine& engine, std::vector<DemoRequest> workload, const DemoOptions& o, bool live_grid) {
  DemoRun run;
  run.workload = std::move(workload);
  const int total = static_cast<int>(run.workload.size());
  Progress progress(total, !live_grid);
  std::optional<LiveGrid> grid;
  if (live_grid) grid.emplace(o.columns);

  std::multimap<int, RequestId> cancel_at;  // step -> request
  std::map<uint64_t, std::vector<RequestId>> samples;  // parent -> its parallel samples
  size_t next = 0;
  int step = 0, done = 0, peak = -1;
  const auto t0 = Clock::now();
  const int usable = engine.manager().pool().num_usable_blocks();
  while (next < run.workload.size() || engine.has_unfinished()) {
    // An idle engine jumps to the next arrival: steps count work, not waiting.
    if (!engine.has_unfinished() && next < run.workload.size()) step = std::max(step, run.workload[next].arrival_step);
    for (; next < run.workload.size() && run.workload[next].arrival_step <= step; ++next) {
      const DemoRequest& d = run.workload[next];
      const RequestId id = engine.add_request(d.request);
      if (d.cancel_after_steps >= 0) cancel_at.emplace(step + d.cancel_after_steps, id);
    }
    for (auto it = cancel_at.begin(); it != cancel_at.end() && it->first <= step; it = cancel_at.erase(it)) {
      bool aborted = engine.abort_request(it->second);  // takes its parallel samples along
      for (RequestId child : samples[it->second.value]) aborted = engine.abort_request(child) || aborted;
      run.cancelled += aborted ? 1 : 0;
    }
    for (RequestOutput& out : engine.step()) {
      if (out.sample_index > 0) {
        auto& kids = samples[out.parent.value];
        if (std::find(kids.begin(), kids.end(), out.id) == kids.end()) kids.push_back(out.id);
      }
      if (!out.finished) continue;
      if (out.sample_index == 0) ++done;
      run.finished.push_back(std::move(out));
    }
    ++step;
    const int in_use = engine.stats().blocks_in_use.empty() ? 0 : engine.stats().blocks_in_use.back();
    run.steps.push_back(StepSample{in_use, engine.scheduler().num_running()});
    if (o.snapshot_step < 0 ? in_use > peak : step == o.snapshot_step) {
      peak = in_use;
      run.pool = snapshot_pool(engine, step);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double tps = secs > 0 ? static_cast<double>(engine.stats().output_tokens) / secs : 0.0;
    const auto& ss = engine.scheduler().stats();
    const uint64_t preemptions = ss.preemptions_recompute + ss.preemptions_swap;
    if (grid && grid->due(next == run.workload.size() && !engine.has_unfinished())) {
      grid->draw(snapshot_pool(engine, step),
                 fmt::format("{} {}/{} requests  step {}  {:.0f} tok/s  {}/{} blocks in use  {} preemptions",
                             progress_bar(static_cast<double>(done) / total, 24), done, total, step, tps, in_use,
                             usable, preemptions));
    }
    progress.update(done, step, tps, static_cast<double>(in_use) / usable, preemptions);
  }
  run.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  run.pool_moment = o.snapshot_step < 0 ? "peak usage" : fmt::format("step {}", o.snapshot_step);
  progress.finish();
  if (grid) grid->finish();
  return run;
}

nlohmann::json tier_json(const TierHitTokens& t) {
  return nlohmann::json{{"device", t.device}, {"host", t.host}, {"disk", t.disk}, {"remote", t.remote}};
}

std::string mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / (1 << 20)); }

nlohmann::json build_report(const LLMEngine& engine, const Model& model, const DemoRun& run, const DemoOptions& o,
                            bool builtin) {
  using nlohmann::json;
  const EngineStats& es = engine.stats();
  const SchedulerStats& ss = engine.scheduler().stats();
  const PrefixCacheStats& pc = engine.manager().prefix_cache_stats();
  const EngineConfig& cfg = engine.config();
  const ModelConfig& mc = engine.model_config();

  int completed = 0, by_stop = 0, by_length = 0, aborted = 0, rejected = 0, samples = 0;
  std::vector<double> ttft, tpot;
  std::vector<const RequestOutput*> all;
  long long prompt_tokens = 0, hit_tokens = 0;
  TierHitTokens hit_by_tier;
  for (const RequestOutput& out : run.finished) {
    all.push_back(&out);
    const bool ok = out.finish_reason == FinishReason::kStop || out.finish_reason == FinishReason::kLength;
    if (ok && out.tpot_ms >= 0) tpot.push_back(out.tpot_ms);
    if (out.sample_index > 0) {  // samples share their parent's arrival and first token
      samples += ok ? 1 : 0;
      continue;
    }
    switch (out.finish_reason) {
      case FinishReason::kStop:
        ++by_stop;
        break;
      case FinishReason::kLength:
        ++by_length;
        break;
      case FinishReason::kAborted:
        ++aborted;
        break;
      case FinishReason::kRejected:
        ++rejected;
        break;
      case FinishReason::kNone:
        break;
    }
    if (!ok) continue;
    ++completed;
    if (out.ttft_ms >= 0) ttft.push_back(out.ttft_ms);
    prompt_tokens += static_cast<long long>(out.prompt.size());
    hit_tokens += out.prefix_hit_tokens;
    hit_by_tier.device += out.hit_tokens_by_tier.device;
    hit_by_tier.host += out.hit_tokens_by_tier.host;
    hit_by_tier.disk += out.hit_tokens_by_tier.disk;
    hit_by_tier.remote += out.hit_tokens_by_tier.remote;
  }

  int shared = 0, parallel = 0, planned_cancel = 0, last_arrival = 0;
  for (const DemoRequest& d : run.workload) {
    if (d.system_prompt >= 0) ++shared;
    if (d.request.n > 1) ++parallel;
    if (d.cancel_after_steps >= 0) ++planned_cancel;
    last_arrival = std::max(last_arrival, d.arrival_step);
  }

  const size_t bytes_per_token =
      mc.kv_cache_spec(cfg.block_size, cfg.kv_dtype).bytes_per_token_per_layer() * static_cast<size_t>(mc.n_layers);
  const size_t bytes_per_block = bytes_per_token * static_cast<size_t>(cfg.block_size);
  int peak_running = 0, peak_blocks = 0;
  std::vector<int> in_use;
  for (const StepSample& s : run.steps) {
    peak_running = std::max(peak_running, s.running);
    peak_blocks = std::max(peak_blocks, s.blocks_in_use);
    in_use.push_back(s.blocks_in_use);
  }
  const int usable = engine.manager().pool().num_usable_blocks();
  const double reservation = static_cast<double>(engine.max_model_len()) * static_cast<double>(bytes_per_token);
  const double contiguous = peak_running * reservation;
  const double paged = static_cast<double>(peak_blocks) * static_cast<double>(bytes_per_block);
  const double pool_bytes = static_cast<double>(usable) * static_cast<double>(bytes_per_block);
  const double step_seconds = es.schedule_seconds + es.copy_seconds + es.forward_seconds;
  const double wall = std::max(run.wall_seconds, 1e-9);
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };

  // The chart's series is resampled to at most 120 points so the JSON stays small.
  const std::vector<int> chart = [&] {
    std::vector<int> out;
    const size_t n = in_use.size(), w = std::min<size_t>(n, 120);
    for (size_t i = 0; i < w; ++i) {
      const size_t b = i * n / w, e = std::max(b + 1, (i + 1) * n / w);
      out.push_back(
          *std::max_element(in_use.begin() + static_cast<ptrdiff_t>(b), in_use.begin() + static_cast<ptrdiff_t>(e)));
    }
    return out;
  }();

  json j;
  j["model"] = {{"source", model.source()}, {"builtin_random", builtin}, {"config", mc.describe()}};
  j["engine"] = {{"block_size", cfg.block_size},
                 {"num_blocks", engine.num_blocks()},
                 {"usable_blocks", usable},
                 {"swap_blocks", engine.swap_blocks()},
                 {"max_model_len", engine.max_model_len()},
                 {"kv_dtype", std::string(dtype_name(cfg.kv_dtype))},
                 {"preemption_mode", std::string(preemption_mode_name(cfg.scheduler.preemption_mode))},
                 {"prefix_caching", cfg.enable_prefix_caching},
                 {"max_num_seqs", cfg.scheduler.max_num_seqs},
                 {"max_num_batched_tokens", cfg.scheduler.max_num_batched_tokens},
                 {"kernel_threads", kernel_threads()}};
  j["workload"] = {{"requests", run.workload.size()},        {"seed", o.seed},
                   {"system_prompts", o.system_prompts},     {"behind_system_prompt", shared},
                   {"parallel_sampling_requests", parallel}, {"cancel_planned", planned_cancel},
                   {"last_arrival_step", last_arrival}};
  j["requests"] = {{"submitted", run.workload.size()},
                   {"completed", completed},
                   {"finished_stop", by_stop},
                   {"finished_length", by_length},
                   {"cancelled", run.cancelled},
                   {"aborted", aborted},
                   {"rejected", rejected},
                   {"parallel_samples_completed", samples}};
  j["steps"] = es.steps;
  j["wall_seconds"] = run.wall_seconds;
  j["tokens"] = {{"prompt", prompt_tokens},
                 {"prompt_from_prefix_cache", hit_tokens},
                 {"prompt_from_prefix_cache_by_tier", tier_json(hit_by_tier)},
                 {"prompt_computed", es.prompt_tokens_computed},
                 {"output", es.output_tokens}};
  j["throughput"] = {{"requests_per_s", completed / wall},
                     {"output_tokens_per_s", static_cast<double>(es.output_tokens) / wall},
                     {"tokens_per_s", static_cast<double>(es.output_tokens + es.prompt_tokens_computed) / wall}};
  j["latency_ms"] = {{"ttft_p50", num(percentile(ttft, 50))},
                     {"ttft_p99", num(percentile(ttft, 99))},
                     {"tpot_p50", num(percentile(tpot, 50))},
                     {"tpot_p99", num(percentile(tpot, 99))}};
  j["prefix_cache"] = {{"hit_rate", pc.hit_rate()},
                       {"lookups", pc.requests},
                       {"queried_tokens", pc.queries},
                       {"hit_tokens", pc.hits},
                       {"preempted_lookups", pc.preempted_requests},
                       {"preempted_hit_tokens", pc.preempted_hits}};
  j["blocks"] = {{"usable", usable}, {"peak_in_use", peak_blocks}, {"in_use_over_time", chart}};
  j["memory"] = {{"bytes_per_block", bytes_per_block},
                 {"bytes_per_token", bytes_per_token},
                 {"pool_bytes", pool_bytes},
                 {"peak_running_requests", peak_running},
                 {"paged_peak_bytes", paged},
                 {"contiguous_reservation_bytes_per_request", reservation},
                 {"contiguous_peak_bytes", contiguous},
                 {"contiguous_over_paged", paged > 0 ? contiguous / paged : 0.0},
                 {"contiguous_requests_fitting_pool", static_cast<int>(pool_bytes / reservation)}};
  j["preemptions"] = {{"recompute", ss.preemptions_recompute},
                      {"swap", ss.preemptions_swap},
                      {"blocks_swapped_out", ss.blocks_swapped_out},
                      {"blocks_swapped_in", ss.blocks_swapped_in},
                      {"blocks_swap_resumed_from_cache", ss.blocks_swap_resumed_from_cache},
                      {"blocks_swap_dropped", ss.blocks_swap_dropped},
                      {"blocks_swap_copies_deferred", ss.blocks_swap_copies_deferred},
                      {"blocks_swap_copies_skipped", ss.blocks_swap_copies_skipped},
                      {"admission_pauses", ss.admission_pauses}};
  j["pool_snapshot"] = {{"moment", run.pool_moment},
                        {"after_step", run.pool.step},
                        {"owned", run.pool.count(BlockState::kOwned)},
                        {"owners", run.pool.num_owners()},
                        {"shared", run.pool.count(BlockState::kShared)},
                        {"cached_free", run.pool.count(BlockState::kCachedFree)},
                        {"free", run.pool.count(BlockState::kFree)}};
  j["cow_copies"] = es.cow_copies;
  j["scheduler"] = {{"seconds", es.schedule_seconds},
                    {"step_seconds", step_seconds},
                    {"fraction_of_step", step_seconds > 0 ? es.schedule_seconds / step_seconds : 0.0},
                    {"copy_seconds", es.copy_seconds},
                    {"forward_seconds", es.forward_seconds}};
  if (const TieredKVCache* tiers = engine.tiers()) {
    auto tier = [](const TierStats& t, int capacity) {
      return json{{"capacity_blocks", capacity},
                  {"lookups", t.lookups},
                  {"hits", t.hits},
                  {"stored_blocks", t.stored_blocks},
                  {"loaded_blocks", t.loaded_blocks},
                  {"evictions", t.evictions},
                  {"demotions", t.demotions},
                  {"swapped_out_blocks", t.swapped_out_blocks},
                  {"swapped_in_blocks", t.swapped_in_blocks},
                  {"corrupt_blocks", t.corrupt_blocks},
                  {"degraded", t.degraded}};
    };
    json t = {{"host", nullptr}, {"disk", nullptr}};
    if (tiers->host()) t["host"] = tier(tiers->host()->stats(), tiers->host()->capacity_blocks());
    if (tiers->disk()) t["disk"] = tier(tiers->disk()->stats(), tiers->disk()->capacity_blocks());
    j["tiers"] = t;
  }
  // One record per finished output (parallel samples included), in id order.
  std::vector<const RequestOutput*> by_id = all;
  std::sort(by_id.begin(), by_id.end(), [](auto* a, auto* b) { return a->id.value < b->id.value; });
  json records = json::array();
  for (const RequestOutput* out : by_id) {
    json rec = {{"id", out->id.value},
                {"sample_index", out->sample_index},
                {"prompt_tokens", out->prompt.size()},
                {"output_tokens", out->output.size()},
                {"finish_reason", std::string(finish_reason_name(out->finish_reason))},
                {"prefix_hit_tokens", out->prefix_hit_tokens},
                {"hit_tokens_by_tier", tier_json(out->hit_tokens_by_tier)},
                {"ttft_ms", out->ttft_ms >= 0 ? json(out->ttft_ms) : json(nullptr)},
                {"preemptions", out->num_preemptions}};
    if (out->sample_index > 0) rec["parent"] = out->parent.value;
    records.push_back(std::move(rec));
  }
  j["request_records"] = std::move(records);
  j["output_digest"] = fmt::format("{:016x}", output_digest(all));
  return j;
}

std::string format_report(const nlohmann::json& j, const DemoRun& run, const DemoOptions& o, const Tokenizer* tok) {
  auto d = [](const nlohmann::json& v) { return v.is_null() ? std::nan("") : v.get<double>(); };
  auto ms = [&](const nlohmann::json& v) { return v.is_null() ? std::string("-") : fmt::format("{:.1f} ms", d(v)); };
  const auto& req = j["requests"];
  const auto& mem = j["memory"];
  const auto& pre = j["preemptions"];
  std::string r;
  r += fmt::format(
      "requests      {} submitted: {} completed ({} at a stop token, {} at max tokens), {} cancelled "
      "mid-flight, {} rejected; {} extra parallel samples completed\n",
      req["submitted"].get<int>(), req["completed"].get<int>(), req["finished_stop"].get<int>(),
      req["finished_length"].get<int>(), req["aborted"].get<int>(), req["rejected"].get<int>(),
      req["parallel_samples_completed"].get<int>());
  r += fmt::format(
      "throughput    {:.1f} requests/s, {:.0f} output tokens/s, {:.0f} tokens/s computed (prefill + "
      "output); {:.1f} s, {} steps\n",
      d(j["throughput"]["requests_per_s"]), d(j["throughput"]["output_tokens_per_s"]),
      d(j["throughput"]["tokens_per_s"]), d(j["wall_seconds"]), j["steps"].get<uint64_t>());
  r += fmt::format("latency       time to first token p50 {}, p99 {};  time per output token p50 {}, p99 {}\n",
                   ms(j["latency_ms"]["ttft_p50"]), ms(j["latency_ms"]["ttft_p99"]), ms(j["latency_ms"]["tpot_p50"]),
                   ms(j["latency_ms"]["tpot_p99"]));
  const auto& pc = j["prefix_cache"];
  const auto& tk = j["tokens"];
  const double prompt = std::max(1.0, tk["prompt"].get<double>());
  r += fmt::format(
      "prefix cache  {:.1f}% of prompt tokens came from the cache at admission ({} of {}); lookup hit "
      "rate {:.1f}% over {} lookups (retries of waiting requests included, as vLLM counts)\n",
      100 * tk["prompt_from_prefix_cache"].get<double>() / prompt, tk["prompt_from_prefix_cache"].get<uint64_t>(),
      tk["prompt"].get<uint64_t>(), 100 * d(pc["hit_rate"]), pc["lookups"].get<uint64_t>());
  if (j.contains("tiers")) {
    const auto& bt = tk["prompt_from_prefix_cache_by_tier"];
    r += fmt::format("KV tiers      prefix-hit tokens by tier: device {}, host {}, disk {}\n", bt["device"].get<int>(),
                     bt["host"].get<int>(), bt["disk"].get<int>());
  }
  const std::string swapped =
      pre["swap"].get<uint64_t>() == 0
          ? std::string()
          : fmt::format(
                " ({} blocks swapped out: {} copied back in, {} still in the device prefix cache at resume, "
                "{} dropped with cancelled requests; {} copied out to host, {} copies deferred and never "
                "needed)",
                pre["blocks_swapped_out"].get<uint64_t>(), pre["blocks_swapped_in"].get<uint64_t>(),
                pre["blocks_swap_resumed_from_cache"].get<uint64_t>(), pre["blocks_swap_dropped"].get<uint64_t>(),
                pre["blocks_swapped_out"].get<uint64_t>() - pre["blocks_swap_copies_skipped"].get<uint64_t>(),
                pre["blocks_swap_copies_skipped"].get<uint64_t>());
  r += fmt::format("preemption    {} by recompute, {} by swap{}; admission paused {} times (high watermark)\n",
                   pre["recompute"].get<uint64_t>(), pre["swap"].get<uint64_t>(), swapped,
                   pre["admission_pauses"].get<uint64_t>());
  r += fmt::format("copy-on-write {} block copies (parallel samples writing into a shared partial block)\n",
                   j["cow_copies"].get<uint64_t>());
  const auto& sc = j["scheduler"];
  const double steps = std::max(1.0, j["steps"].get<double>());
  r += fmt::format(
      "scheduler     {:.1f}% of step time ({:.3f} ms of {:.3f} ms per step; the rest is the forward "
      "pass and block copies)\n",
      100 * d(sc["fraction_of_step"]), 1e3 * d(sc["seconds"]) / steps, 1e3 * d(sc["step_seconds"]) / steps);

  r += fmt::format("\nmemory        at most {} requests were running at once\n",
                   mem["peak_running_requests"].get<int>());
  const int max_len = j["engine"]["max_model_len"].get<int>();
  r += fmt::format(
      "  contiguous per-request reservation ({} tokens each, as pre-paging servers reserve): "
      "{} x {} = {}\n",
      max_len, mem["peak_running_requests"].get<int>(), mib(d(mem["contiguous_reservation_bytes_per_request"])),
      mib(d(mem["contiguous_peak_bytes"])));
  r += fmt::format("  paged, at peak: {} blocks x {} bytes = {}  ({:.1f}x less)\n",
                   j["blocks"]["peak_in_use"].get<int>(), mem["bytes_per_block"].get<uint64_t>(),
                   mib(d(mem["paged_peak_bytes"])), d(mem["contiguous_over_paged"]));
  r += fmt::format("  this {} pool would hold {} contiguous reservation(s) at once\n", mib(d(mem["pool_bytes"])),
                   mem["contiguous_requests_fitting_pool"].get<int>());

  std::vector<int> in_use;
  for (const StepSample& s : run.steps) in_use.push_back(s.blocks_in_use);
  const int usable = j["blocks"]["usable"].get<int>();
  r += fmt::format("\nblocks in use over {} steps (pool: {} usable blocks; peak {})\n", in_use.size(), usable,
                   j["blocks"]["peak_in_use"].get<int>());
  const auto rows = block_chart(in_use, usable, 64, 5);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string label = i == 0 ? std::to_string(usable) : i + 1 == rows.size() ? "0" : "";
    r += fmt::format("  {:>5} |{}\n", label, rows[i]);
  }
  r += fmt::format("        step 0{:>{}}\n", fmt::format("step {}", in_use.size()), 58);
  std::vector<int> running;
  for (const StepSample& s : run.steps) running.push_back(s.running);
  const int max_running = running.empty() ? 0 : *std::max_element(running.begin(), running.end());
  r += fmt::format("  running |{}  (requests running at once, 0-{})\n", sparkline(running, max_running, 64),
                   max_running);

  if (o.show_blocks) {
    r += fmt::format("\npool {}: {} blocks owned by {} requests, {} shared, {} cached-free, {} free\n",
                     o.snapshot_step < 0 ? fmt::format("at peak usage (after step {})", run.pool.step)
                                         : fmt::format("after step {}", run.pool.step),
                     run.pool.count(BlockState::kOwned), run.pool.num_owners(), run.pool.count(BlockState::kShared),
                     run.pool.count(BlockState::kCachedFree), run.pool.count(BlockState::kFree));
    r += render_block_grid(run.pool, o.columns, false);
    r += block_grid_legend(false) + "\n";
  }
  if (tok != nullptr) {
    // One completed story, to show the model is real.
    for (const RequestOutput& out : run.finished)
      if (out.sample_index == 0 && out.finish_reason == FinishReason::kStop && out.output.size() > 20) {
        std::vector<TokenId> ids = out.prompt;
        ids.insert(ids.end(), out.output.begin(), out.output.end());
        r += fmt::format("\na sample (request {}, {} prompt + {} generated tokens):\n{}\n", out.id.value,
                         out.prompt.size(), out.output.size(), tok->render(ids));
        break;
      }
  }
  return r;
}

int run_demo(DemoOptions o, const CLI::App& sub) {
  o.engine.apply_threads();
  if (o.columns < 8) throw ConfigError(fmt::format("--columns must be at least 8, got {}", o.columns));
  if (!o.tokenizer.empty() && o.model.empty())
    throw ConfigError("--tokenizer needs --model (the built-in model has no vocabulary to speak of)");
  if (o.requests < 1) throw ConfigError(fmt::format("--requests must be at least 1, got {}", o.requests));
  const std::string snapshot_ext = std::filesystem::path(o.snapshot).extension().string();
  if (!o.snapshot.empty() && snapshot_ext != ".svg" && snapshot_ext != ".html")
    throw ConfigError(fmt::format("--snapshot '{}' must end in .svg or .html", o.snapshot));

  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  const bool builtin = o.model.empty();
  if (builtin) {
    model = make_random_model(builtin_random_model_config(), kBuiltinModelSeed);
  } else {
    model = std::make_unique<Llama2cCheckpoint>(o.model);
    if (!o.tokenizer.empty()) tok = std::make_unique<Tokenizer>(o.tokenizer, model->config().vocab_size);
  }

  EngineConfig cfg = o.engine.to_config();
  // The default pool holds 1.25 maximum-length sequences, far below the workload's peak demand,
  // so the scheduler must preempt; --num-blocks or --kv-cache-bytes choose another.
  if (sub.count("--num-blocks") == 0 && sub.count("--kv-cache-bytes") == 0) {
    if (cfg.block_size <= 0) throw ConfigError(fmt::format("--block-size must be positive, got {}", cfg.block_size));
    const int max_len =
        cfg.max_model_len > 0 ? std::min(cfg.max_model_len, model->config().seq_len) : model->config().seq_len;
    const auto pool_tokens = static_cast<int>(std::ceil(max_len * kDefaultPoolSequences));
    cfg.num_blocks = (pool_tokens + cfg.block_size - 1) / cfg.block_size + 1;
  }
  LLMEngine engine(*model, cfg);

  DemoWorkloadConfig wc;
  wc.num_requests = o.requests;
  wc.num_system_prompts = o.system_prompts;
  wc.parallel_fraction = o.parallel_fraction;
  wc.cancel_fraction = o.cancel_fraction;
  wc.arrivals_per_step = o.arrival_rate;
  wc.initial_burst = std::min(16, o.requests);
  wc.max_model_len = engine.max_model_len();
  wc.vocab_size = model->config().vocab_size;
  wc.seed = o.seed;
  std::vector<DemoRequest> workload = make_demo_workload(wc, tok.get());

  const bool live_grid = o.show_blocks && !o.json && isatty(STDOUT_FILENO) != 0;
  if (!o.json) {
    fmt::print("pagedkv demo: a serving workload on the paged KV cache\n");
    if (builtin)
      fmt::print(
          "model: the built-in deterministic random-weight LLaMA-shaped model (seed {}; no --model given):\n"
          "       its tokens are not language, but its compute and KV footprint are a real model's\n",
          kBuiltinModelSeed);
    else fmt::print("model: {}\n", model->source());
    fmt::print("       {}\n{}\n", model->config().describe(), engine.describe());
    int shared = 0, parallel = 0, cancel = 0;
    for (const DemoRequest& d : workload) {
      shared += d.system_prompt >= 0;
      parallel += d.request.n > 1;
      cancel += d.cancel_after_steps >= 0;
    }
    fmt::print(
        "workload: {} requests (seed {}): {} behind {} shared system prompts, {} with 2-4 parallel samples, "
        "{} to be cancelled mid-flight; {} at once, the rest arriving over {} steps\n\n",
        workload.size(), o.seed, shared, o.system_prompts, parallel, cancel, wc.initial_burst,
        workload.back().arrival_step);
    std::fflush(stdout);
  }

  DemoRun run = run_workload(engine, std::move(workload), o, live_grid);
  if (run.pool.cells.empty())
    throw ConfigError(
        fmt::format("--snapshot-step {} is past the run's last step ({})", o.snapshot_step, run.steps.size()));
  nlohmann::json report = build_report(engine, *model, run, o, builtin);
  const std::string text = format_report(report, run, o, tok.get());
  if (o.json) fmt::print("{}\n", report.dump(2));
  else fmt::print("{}", text);

  if (!o.snapshot.empty()) {
    const std::string when = o.snapshot_step < 0
                                 ? fmt::format("at peak usage (after step {} of {})", run.pool.step, run.steps.size())
                                 : fmt::format("after step {} of {}", run.pool.step, run.steps.size());
    const std::string title =
        fmt::format("pagedkv block pool {}: {} blocks of {} tokens", when, run.pool.cells.size(), run.pool.block_size);
    const std::string body = snapshot_ext == ".svg" ? render_block_svg(run.pool, o.columns, title)
                                                    : render_block_html(run.pool, o.columns, title, text);
    std::ofstream f(o.snapshot, std::ios::binary);
    f << body;
    if (!f) throw Error(fmt::format("cannot write --snapshot file '{}'", o.snapshot));
    if (!o.json) fmt::print("\nsnapshot of the pool at {} written to {}\n", run.pool_moment, o.snapshot);
  }
  return 0;
}

const CommandRegistration kDemoCommand{Command{
    "demo", "serve a mixed workload on a small paged pool and report what paging did (the main job)",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<DemoOptions>();
      sub.add_option("--model,-m", o->model, "llama2.c checkpoint (default: the built-in random-weight model)");
      sub.add_option("--tokenizer,-z", o->tokenizer, "llama2.c tokenizer for --model (text prompts, a sample story)");
      sub.add_option("--requests", o->requests, "requests in the workload")->capture_default_str();
      sub.add_option("--seed", o->seed, "workload seed (same seed, same schedule)")->capture_default_str();
      sub.add_option("--system-prompts", o->system_prompts, "shared system prompts (0-24)")->capture_default_str();
      sub.add_option("--parallel-fraction", o->parallel_fraction, "fraction of requests with n = 2..4 samples")
          ->capture_default_str();
      sub.add_option("--cancel-fraction", o->cancel_fraction, "fraction of requests cancelled mid-flight")
          ->capture_default_str();
      sub.add_option("--arrival-rate", o->arrival_rate, "mean arrivals per step after the first 16")
          ->capture_default_str();
      sub.add_flag("--show-blocks", o->show_blocks,
                   "draw the block pool: live on a terminal, and the grid at peak usage in the report");
      sub.add_option("--snapshot", o->snapshot, "write the pool at peak usage to FILE (.svg or .html)");
      sub.add_option("--snapshot-step", o->snapshot_step, "draw the pool after this step instead of at peak usage");
      sub.add_option("--columns", o->columns, "blocks per grid row")->capture_default_str();
      sub.add_flag("--json", o->json, "print the report as JSON");
      o->engine.add_to(sub);
      // The demo sizes its own pool unless told: say so instead of the engine's 16 MiB default.
      sub.get_option("--kv-cache-bytes")
          ->description("KV cache budget, e.g. 16MiB (demo default: 1.25 max-length sequences)")
          ->default_str("");
      const CLI::App* app = &sub;
      return [o, app] { return run_demo(*o, *app); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
