// pagedkv bench hybrid: the multi-session round-robin chat workload of vllm#48435 through the
// KV-cache manager, with a hybrid model (a full-attention and a sliding-window group, Gemma-2's
// layout) and with its full-attention-only twin: prefix hit tokens of each, their ratio, and the
// blocks each needs. Also the hybrid model without the retention policy (every window block
// cached and freed to the back, what vLLM did before #43447), at the same pool and at smaller
// pools (--sweep), where the policies part ways.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "pagedkv/core/error.h"
#include "pagedkv/workload/hybrid_sessions.h"

namespace pagedkv::cli {
namespace {

struct Options {
  HybridSessionsConfig workload;
  int block_size = 16;
  int sliding_block_size = 0;  // 0: block_size (a multiple of it: the sliding layers' smaller KV per token)
  int window = 512;
  double pool_over_working_set = 2.5;  // pool size as a multiple of the twin's working set
  bool sweep = false;
  bool json = false;
};

struct Row {
  double pool_over_working_set = 0;
  int num_blocks = 0;
  HybridSessionsResult full, hybrid, hybrid_no_retention;
  double ratio() const {
    return full.hit_tokens ? static_cast<double>(hybrid.hit_tokens) / static_cast<double>(full.hit_tokens) : 1.0;
  }
};

nlohmann::json result_json(const HybridSessionsResult& r) {
  return {
      {"requests", r.requests},
      {"prompt_tokens", r.prompt_tokens},
      {"hit_tokens", r.hit_tokens},
      {"hit_rate", r.prompt_tokens ? static_cast<double>(r.hit_tokens) / static_cast<double>(r.prompt_tokens) : 0.0},
      {"peak_blocks_in_use", r.peak_blocks_in_use},
      {"evictions", r.pool.evictions},
      {"window_checkpoints_retained", r.pool.window_checkpoints_retained},
      {"window_checkpoints_evicted", r.pool.window_checkpoints_evicted},
      {"window_blocks_slid_out", r.pool.window_blocks_slid_out},
      {"hit_tokens_per_group",
       std::vector<uint64_t>(r.stats.group_hit_tokens.begin(), r.stats.group_hit_tokens.begin() + 2)},
      {"lookups_limited_by_group",
       std::vector<uint64_t>(r.stats.limited_by_group.begin(), r.stats.limited_by_group.begin() + 2)}};
}

int run_bench_hybrid(const Options& o) {
  KVCacheGroupSpec full;
  full.spec.kind = AttentionKind::kFull;
  full.spec.block_size = o.block_size;
  KVCacheGroupSpec sliding = full;
  sliding.spec.kind = AttentionKind::kSlidingWindow;
  sliding.spec.sliding_window = o.window;
  if (o.sliding_block_size > 0) sliding.spec.block_size = o.sliding_block_size;
  const std::vector<KVCacheGroupSpec> hybrid{full, sliding};
  const std::vector<KVCacheGroupSpec> twin = full_attention_twin(hybrid);
  if (o.pool_over_working_set <= 0) throw ConfigError("--pool must be positive");

  // The twin's working set, from a run with a pool that holds everything.
  HybridSessionsConfig probe = o.workload;
  const int longest = probe.system_prompt_tokens + probe.turns * (probe.user_tokens + probe.output_tokens);
  probe.num_blocks = 2 * probe.sessions * (longest / o.block_size + 2) + 1;
  const int64_t working_set = run_hybrid_sessions(probe, twin).full_working_set_blocks;

  std::vector<double> fractions{o.pool_over_working_set};
  if (o.sweep)
    for (double f : {1.5, 1.0, 0.75, 0.5, 0.35})
      if (f < o.pool_over_working_set) fractions.push_back(f);
  std::vector<Row> rows;
  for (double f : fractions) {
    Row row;
    row.pool_over_working_set = f;
    row.num_blocks = static_cast<int>(static_cast<double>(working_set) * f) + 1;
    HybridSessionsConfig c = o.workload;
    c.num_blocks = row.num_blocks;
    try {
      row.full = run_hybrid_sessions(c, twin);
      row.hybrid = run_hybrid_sessions(c, hybrid);
      c.retention = false;
      row.hybrid_no_retention = run_hybrid_sessions(c, hybrid);
    } catch (const ConfigError&) {
      if (rows.empty()) throw;  // the requested pool itself is too small: say why
      break;  // a sweep stops at the first pool that cannot run the workload
    }
    rows.push_back(std::move(row));
  }

  const HybridSessionsConfig& w = o.workload;
  if (o.json) {
    nlohmann::json j;
    j["workload"] = {{"sessions", w.sessions},
                     {"turns", w.turns},
                     {"system_prompt_tokens", w.system_prompt_tokens},
                     {"user_tokens", w.user_tokens},
                     {"output_tokens", w.output_tokens},
                     {"concurrency", w.concurrency},
                     {"block_size", o.block_size},
                     {"sliding_block_size", sliding.spec.block_size},
                     {"sliding_window", o.window},
                     {"checkpoint_interval", w.checkpoint_interval},
                     {"seed", w.seed}};
    j["full_working_set_blocks"] = working_set;
    j["pool_blocks"] = rows.front().num_blocks;
    j["hybrid"] = result_json(rows.front().hybrid);
    j["full"] = result_json(rows.front().full);
    j["hybrid_no_retention"] = result_json(rows.front().hybrid_no_retention);
    j["hybrid_over_full_hit_tokens"] = rows.front().ratio();
    nlohmann::json sweep = nlohmann::json::array();
    for (const Row& r : rows)
      sweep.push_back({{"pool_over_working_set", r.pool_over_working_set},
                       {"pool_blocks", r.num_blocks},
                       {"full_hit_tokens", r.full.hit_tokens},
                       {"hybrid_hit_tokens", r.hybrid.hit_tokens},
                       {"hybrid_no_retention_hit_tokens", r.hybrid_no_retention.hit_tokens},
                       {"hybrid_over_full_hit_tokens", r.ratio()}});
    j["sweep"] = sweep;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "multi-session round robin (vllm#48435 shape): {} sessions x {} turns, system prompt {} tokens, "
      "{} user + {} output tokens a turn, {} running at once\n",
      w.sessions, w.turns, w.system_prompt_tokens, w.user_tokens, w.output_tokens, w.concurrency);
  fmt::print(
      "hybrid: a full-attention group (block {}) + a sliding-window group (window {}, block {}); interval checkpoints: "
      "{}\n",
      o.block_size, o.window, sliding.spec.block_size,
      w.checkpoint_interval > 0 ? fmt::format("every {} tokens", w.checkpoint_interval) : "none");
  fmt::print("twin: both groups full attention. Working set of the twin: {} blocks\n\n", working_set);
  const Row& r = rows.front();
  fmt::print("pool {} blocks ({:.2f}x the twin's working set)\n", r.num_blocks, r.pool_over_working_set);
  fmt::print("{:<28} {:>12} {:>10} {:>12} {:>12} {:>12}\n", "", "hit tokens", "hit rate", "peak blocks", "ckpt kept",
             "slid out");
  auto line = [](const char* name, const HybridSessionsResult& x) {
    fmt::print("{:<28} {:>12} {:>9.1f}% {:>12} {:>12} {:>12}\n", name, x.hit_tokens,
               100.0 * static_cast<double>(x.hit_tokens) / static_cast<double>(std::max<uint64_t>(x.prompt_tokens, 1)),
               x.peak_blocks_in_use, x.pool.window_checkpoints_retained, x.pool.window_blocks_slid_out);
  };
  line("full-attention twin", r.full);
  line("hybrid (retention)", r.hybrid);
  line("hybrid (no retention)", r.hybrid_no_retention);
  fmt::print("hybrid_over_full_hit_tokens {:.4f}\n", r.ratio());
  fmt::print("hybrid lookups limited by the sliding group: {} (of {})\n", r.hybrid.stats.limited_by_group[1],
             r.hybrid.requests);
  if (rows.size() > 1) {
    fmt::print("\n{:>10} {:>10} {:>14} {:>14} {:>18} {:>8}\n", "pool/ws", "blocks", "full hits", "hybrid hits",
               "hybrid no-retain", "ratio");
    for (const Row& x : rows)
      fmt::print("{:>10.2f} {:>10} {:>14} {:>14} {:>18} {:>8.4f}\n", x.pool_over_working_set, x.num_blocks,
                 x.full.hit_tokens, x.hybrid.hit_tokens, x.hybrid_no_retention.hit_tokens, x.ratio());
  }
  return 0;
}

const CommandRegistration kBenchHybridCommand{Command{
    "bench hybrid", "hybrid (sliding + full) vs full-attention-only prefix hits on a multi-session workload",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<Options>();
      o->workload.sessions = 32;
      o->workload.turns = 8;
      o->workload.system_prompt_tokens = 1000;
      o->workload.user_tokens = 200;
      o->workload.output_tokens = 100;
      o->workload.concurrency = 8;
      o->workload.checkpoint_interval = 0;
      sub.add_option("--sessions", o->workload.sessions, "chat sessions")->capture_default_str();
      sub.add_option("--turns", o->workload.turns, "turns per session")->capture_default_str();
      sub.add_option("--system-tokens", o->workload.system_prompt_tokens, "shared system prompt")
          ->capture_default_str();
      sub.add_option("--user-tokens", o->workload.user_tokens, "new user tokens per turn")->capture_default_str();
      sub.add_option("--output-tokens", o->workload.output_tokens, "decoded tokens per turn")->capture_default_str();
      sub.add_option("--concurrency", o->workload.concurrency, "requests running at once")->capture_default_str();
      sub.add_option("--block-size", o->block_size, "tokens per block")->capture_default_str();
      sub.add_option("--window", o->window, "sliding window, tokens")->capture_default_str();
      sub.add_option("--sliding-block-size", o->sliding_block_size,
                     "tokens per sliding-window block, a multiple of --block-size (groups whose layers hold less KV "
                     "per token get larger blocks of the same page; 0: --block-size)")
          ->capture_default_str();
      sub.add_option("--checkpoint-interval", o->workload.checkpoint_interval,
                     "sliding-window checkpoints every N tokens (a multiple of the block size; 0: prompt ends only)")
          ->capture_default_str();
      sub.add_option("--chunk", o->workload.max_num_batched_tokens, "prefill chunk, tokens (0: whole prompt)")
          ->capture_default_str();
      sub.add_option("--pool", o->pool_over_working_set, "pool size as a multiple of the twin's working set")
          ->capture_default_str();
      sub.add_option("--seed", o->workload.seed, "workload seed")->capture_default_str();
      sub.add_flag(
          "--sweep", o->sweep,
          "also smaller pools (1.5, 1, 0.75, 0.5, 0.35 x the working set), down to the first too small to run");
      sub.add_flag("--json", o->json, "print JSON");
      return [o] { return run_bench_hybrid(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
