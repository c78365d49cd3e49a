// pagedkv bench paper: the PagedAttention paper's headline results on pagedkv's own engine
// (docs/paper.md). For the ShareGPT-like and Alpaca-like workloads, each KV reservation policy
// (paged, and the Orca baselines max, pow2, oracle) is swept over request rates (Fig. 12:
// normalized latency against rate; the highest rate below --latency-limit, by a grid then
// bisection); at paged's sustained rate, where every policy's pool goes (Fig. 2); and, paged only,
// the memory parallel samples save by sharing blocks (Fig. 14). Modelled clock: paper_bench.h.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "pagedkv/bench/paper_bench.h"
#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/random_model.h"

namespace pagedkv::cli {
namespace {

using bench::alpaca_like;
using bench::BenchRequest;
using bench::LengthDistribution;
using bench::make_requests;
using bench::MemoryShares;
using bench::paper_model_config;
using bench::PaperSetup;
using bench::run_stream;
using bench::RunResult;
using bench::scaled;
using bench::sharegpt_like;

struct PaperOptions {
  bool quick = false;
  bool json = false;
  int requests = 0;  // 0: 200 (100 with --quick)
  double kv_mib = 0;  // 0: 16 (1.25 with --quick)
  double latency_limit = 0.05;  // s per output token
  std::string cost_preset = "opt-13b-a100";
  std::string range_allocation = "buddy";
  bool additive_linear = false;  // ablation: weight read + GEMMs added, not overlapped
  int bisections = 0;  // 0: 4 (2 with --quick)
  std::vector<std::string> policies{"paged", "oracle", "pow2", "max"};
  double start_rate = 0;  // 0: near Orca (Max)'s capacity; else where the searches start
  std::vector<std::string> workloads{"sharegpt", "alpaca"};
  std::vector<int> parallel_n{2, 4, 6};
  std::vector<int> beam_widths{2, 4, 6};  // Fig. 14's beam search, on the parallel workloads
  std::vector<std::string> parallel_workloads{"alpaca"};
  std::vector<int> prefix_tokens{80, 341};  // Fig. 16 on the Alpaca-like stream (none with --quick)
  std::string plot_dir;
  bool check_invariants = false;
  uint64_t seed = 1;
  int threads = 1;
  bool verbose = false;
  bool prefix_tokens_given = false;
};

constexpr KVReservation kPolicies[] = {KVReservation::kPaged, KVReservation::kOracle, KVReservation::kPow2,
                                       KVReservation::kMax};

struct Curve {
  KVReservation policy{};
  std::vector<RunResult> points;  // in the order run
  double sustained_rate = 0;  // highest rate run whose normalized latency met the limit
  bool bounded = false;  // a rate above it missed the limit (else a lower bound)
};

struct WorkloadResult {
  LengthDistribution dist;
  double mean_prompt = 0, mean_output = 0;
  std::vector<Curve> curves;
  std::vector<RunResult> breakdown;  // per policy, at paged's sustained rate
  struct Sharing {
    int n = 0;
    RunResult run;
  };
  std::vector<Sharing> sharing;
  std::vector<Sharing> beam;  // n: the beam width
  // Fig. 16: the same stream behind a shared prefix, paged (prefix caching) against oracle.
  struct Prefixed {
    int prefix_tokens = 0;
    Curve paged, oracle;
  };
  std::vector<Prefixed> prefixed;
};

struct Bench {
  const Model& model;
  PaperSetup setup;
  PaperOptions o;
  int max_model_len;
  double pool_tokens;

  RunResult run_at(const LengthDistribution& d, KVReservation policy, double rate, int n = 1, int beam = 1) const {
    RunResult r = run_stream(model, setup, policy, make_requests(d, o.requests, rate, max_model_len, o.seed), n, beam);
    r.rate = rate;
    if (o.verbose)
      fmt::print(stderr, "  {} {} n={} beam={} at {:.3f} req/s: {:.4f} s/token, {:.1f} running ({:.1f} s here)\n",
                 d.name, kv_reservation_name(policy), n, beam, rate, r.normalized_latency_s, r.mean_running, r.wall_s);
    return r;
  }

  std::vector<BenchRequest> stream(const LengthDistribution& d, double rate) const {
    return make_requests(d, o.requests, rate, max_model_len, o.seed);
  }

  Curve sweep(const LengthDistribution& d, KVReservation policy, double start_rate) const {
    Curve c;
    c.policy = policy;
    const double growth = o.quick ? 1.6 : 1.5;
    const int bisections = o.bisections;
    double good = 0, bad = 0;
    for (double rate = start_rate; rate < start_rate * 1e3; rate *= growth) {
      c.points.push_back(run_at(d, policy, rate));
      if (c.points.back().normalized_latency_s > o.latency_limit) {
        bad = rate;
        break;
      }
      good = rate;
    }
    if (bad > 0 && good == 0) {  // even the first rate was too much: look below it
      for (double rate = start_rate / growth; rate > start_rate * 1e-3; rate /= growth) {
        c.points.push_back(run_at(d, policy, rate));
        if (c.points.back().normalized_latency_s <= o.latency_limit) {
          good = rate;
          break;
        }
        bad = rate;
      }
    }
    for (int i = 0; i < bisections && good > 0 && bad > 0; ++i) {
      const double mid = std::sqrt(good * bad);
      c.points.push_back(run_at(d, policy, mid));
      (c.points.back().normalized_latency_s <= o.latency_limit ? good : bad) = mid;
    }
    c.sustained_rate = good;
    c.bounded = bad > 0;
    std::sort(c.points.begin(), c.points.end(), [](const RunResult& a, const RunResult& b) { return a.rate < b.rate; });
    return c;
  }

  WorkloadResult run(const LengthDistribution& d) const {
    WorkloadResult w;
    w.dist = d;
    for (const BenchRequest& r : stream(d, 1.0)) {
      w.mean_prompt += r.prompt_tokens;
      w.mean_output += r.output_tokens;
    }
    w.mean_prompt /= o.requests;
    w.mean_output /= o.requests;
    // Start at what max-length reservations could serve with steps of the fixed cost (about Orca
    // (Max)'s capacity): a run's cost grows with its steps, and the runs below it, where the batch
    // is a few sequences, are the slowest and say nothing about any knee.
    const double start = o.start_rate > 0 ? o.start_rate
                                          : std::max(1.0, pool_tokens / max_model_len) /
                                                (w.mean_output * setup.cost.step_overhead_ms / 1e3);
    auto selected = [&](KVReservation p) {
      return std::find(o.policies.begin(), o.policies.end(), kv_reservation_name(p)) != o.policies.end();
    };
    // Paged from the start; each baseline from paged's sustained rate (downwards when it misses
    // there), which spends its runs near its own knee. Without paged, from the start.
    double fixed = start;
    if (selected(KVReservation::kPaged)) {
      w.curves.push_back(sweep(d, KVReservation::kPaged, start));
      if (w.curves[0].sustained_rate > 0) fixed = w.curves[0].sustained_rate;
    }
    for (KVReservation p : kPolicies)
      if (p != KVReservation::kPaged && selected(p)) w.curves.push_back(sweep(d, p, fixed));
    for (const Curve& c : w.curves) w.breakdown.push_back(run_at(d, c.policy, fixed));
    if (std::find(o.parallel_workloads.begin(), o.parallel_workloads.end(), d.name) != o.parallel_workloads.end()) {
      for (int n : o.parallel_n) w.sharing.push_back({n, run_at(d, KVReservation::kPaged, fixed / n / 2, n)});
      for (int k : o.beam_widths) w.beam.push_back({k, run_at(d, KVReservation::kPaged, fixed / k / 2, 1, k)});
    }
    if (d.name == "alpaca")
      for (int k : o.prefix_tokens) {
        LengthDistribution dp = d;
        dp.shared_prefix_tokens = k;
        dp.name = fmt::format("alpaca+prefix{}", k);
        w.prefixed.push_back(
            {k, sweep(dp, KVReservation::kPaged, start / 4), sweep(dp, KVReservation::kOracle, start / 4)});
      }
    return w;
  }
};

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

nlohmann::json run_json(const RunResult& r) {
  return {{"rate", r.rate},
          {"normalized_latency_s", r.normalized_latency_s},
          {"throughput_rps", r.throughput_rps},
          {"completed", r.completed},
          {"rejected", r.rejected},
          {"mean_running", r.mean_running},
          {"duration_s", r.duration_s},
          {"wall_s", r.wall_s}};
}

nlohmann::json memory_json(const RunResult& r) {
  return {{"token_states", r.memory.token_states},
          {"reserved", r.memory.reserved},
          {"internal_fragmentation", r.memory.internal_fragmentation},
          {"external_fragmentation", r.memory.external_fragmentation},
          {"free", r.memory.free},
          {"token_state_share_of_used", r.memory.token_state_share_of_used()},
          {"mean_slots_per_running", r.mean_slots_per_running},
          {"mean_running", r.mean_running}};
}

double sharing_saving(const RunResult& r) {
  return r.logical_blocks > 0 ? 1.0 - r.physical_blocks / r.logical_blocks : 0;
}

void write_plots(const std::string& dir, const std::vector<WorkloadResult>& results, double limit) {
  // Without gnuplot the data and scripts are still written: `gnuplot FILE.gp` draws them elsewhere.
  const bool draw = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  if (!draw) fmt::print(stderr, "bench paper: no gnuplot here; writing {}/*.gp and *.dat only\n", dir);
  std::filesystem::create_directories(dir);
  auto gnuplot = [draw](const std::string& base) {
    if (draw && std::system(fmt::format("gnuplot '{}.gp'", base).c_str()) != 0)
      throw Error("bench paper: gnuplot failed on " + base + ".gp");
  };
  for (const WorkloadResult& w : results) {
    const std::string base = dir + "/paper_fig12_" + w.dist.name;
    std::string plot;
    for (const Curve& c : w.curves) {
      const std::string dat = base + "_" + std::string(kv_reservation_name(c.policy)) + ".dat";
      std::ofstream f(dat);
      for (const RunResult& r : c.points) f << fmt::format("{} {}\n", r.rate, r.normalized_latency_s);
      plot += fmt::format("{}'{}' using 1:2 with linespoints title '{}'", plot.empty() ? "" : ", ", dat,
                          kv_reservation_name(c.policy));
    }
    std::ofstream gp(base + ".gp");
    gp << "set terminal svg size 640,420 dynamic background '#ffffff'\n"
       << fmt::format("set output '{}.svg'\n", base)
       << fmt::format("set title 'Normalized latency vs request rate ({}-like)'\n", w.dist.name)
       << "set xlabel 'request rate (req/s, modelled clock)'\nset ylabel 'normalized latency (s/token)'\n"
       << "set logscale y\nset key top left\nset grid\n"
       << fmt::format("set arrow from graph 0, first {0} to graph 1, first {0} nohead dashtype 2\n", limit) << "plot "
       << plot << "\n";
    gp.close();
    gnuplot(base);
  }
  // Fig. 14: memory saved by sharing, parallel sampling beside beam search, per workload that ran them.
  for (const WorkloadResult& w : results) {
    if (w.sharing.empty() && w.beam.empty()) continue;
    const std::string base14 = dir + "/paper_fig14_" + w.dist.name;
    std::ofstream par(base14 + "_parallel.dat"), beam(base14 + "_beam.dat");
    for (const auto& s : w.sharing) par << fmt::format("{} {}\n", s.n, 100 * sharing_saving(s.run));
    for (const auto& s : w.beam) beam << fmt::format("{} {}\n", s.n, 100 * sharing_saving(s.run));
    par.close();
    beam.close();
    std::ofstream gp(base14 + ".gp");
    gp << "set terminal svg size 640,420 dynamic background '#ffffff'\n"
       << fmt::format("set output '{}.svg'\n", base14)
       << fmt::format("set title 'KV memory saved by sharing blocks ({}-like, paged)'\n", w.dist.name)
       << "set xlabel 'parallel samples n / beam width k'\nset ylabel 'memory saving (%)'\n"
       << "set yrange [0:*]\nset xtics 1\nset key top left\nset grid\n"
       << fmt::format(
              "plot '{0}_parallel.dat' using 1:2 with linespoints title 'parallel sampling', "
              "'{0}_beam.dat' using 1:2 with linespoints title 'beam search'\n",
              base14);
    gp.close();
    gnuplot(base14);
  }
  // Fig. 2: stacked shares of the pool per policy, for each workload.
  const std::string base = dir + "/paper_fig2";
  std::ofstream dat(base + ".dat");
  for (const WorkloadResult& w : results)
    for (size_t i = 0; i < w.breakdown.size(); ++i) {
      const MemoryShares& m = w.breakdown[i].memory;
      dat << fmt::format("\"{} {}\" {} {} {} {} {}\n", w.dist.name, kv_reservation_name(w.curves[i].policy),
                         m.token_states, m.reserved, m.internal_fragmentation, m.external_fragmentation, m.free);
    }
  dat.close();
  std::ofstream gp(base + ".gp");
  gp << "set terminal svg size 860,460 dynamic background '#ffffff'\n"
     << fmt::format("set output '{}.svg'\n", base)
     << "set title 'Where the KV pool goes at paged''s sustained rate'\nset ylabel 'share of KV slots'\n"
     << "set xtics rotate by -35 nomirror\nset bmargin 6\n"
     << "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 border -1\n"
     << "set boxwidth 0.7\nset yrange [0:1]\nset key outside right\n"
     << fmt::format(
            "plot '{0}.dat' using 2:xtic(1) title 'token states', '' using 3 title 'reserved', "
            "'' using 4 title 'internal frag.', '' using 5 title 'external frag.', '' using 6 title 'free'\n",
            base);
  gp.close();
  gnuplot(base);
}

int run_paper(PaperOptions o) {
  // --quick: a quarter of the lengths, the model's context and the block size, and a small pool,
  // so a run takes a fraction of a second; the requests of a run stay many times what the pool
  // holds at once, or no rate would overload it.
  if (o.requests == 0) o.requests = o.quick ? 100 : 1000;
  if (o.kv_mib == 0) o.kv_mib = o.quick ? 1.25 : 16;
  if (o.bisections == 0) o.bisections = o.quick ? 2 : 4;
  if (o.bisections < 1 || o.bisections > 10)
    throw ConfigError(fmt::format("--bisections must be in 1..10, got {}", o.bisections));
  const double length_scale = o.quick ? 0.25 : 1.0;
  if (o.quick && !o.prefix_tokens_given) o.prefix_tokens.clear();
  for (int k : o.prefix_tokens)
    if (k < 1 || k > 1000) throw ConfigError(fmt::format("--prefix-tokens values must be in 1..1000, got {}", k));
  if (o.threads < 1) throw ConfigError(fmt::format("--threads must be at least 1, got {}", o.threads));
  set_kernel_threads(o.threads);
  if (o.requests < 5) throw ConfigError(fmt::format("--requests must be at least 5, got {}", o.requests));
  if (!(o.kv_mib > 0)) throw ConfigError("--kv-mib must be positive");
  if (!(o.latency_limit > 0)) throw ConfigError("--latency-limit must be positive");
  for (int n : o.parallel_n)
    if (n < 2 || n > 16) throw ConfigError(fmt::format("--parallel-n values must be in 2..16, got {}", n));
  for (const std::string& p : o.policies) (void)parse_kv_reservation(p);  // ConfigError naming the choices
  if (o.policies.empty()) throw ConfigError("--policies needs at least one policy");
  if (o.start_rate < 0) throw ConfigError("--start-rate must be positive");
  for (int k : o.beam_widths)
    if (k < 2 || k > 16) throw ConfigError(fmt::format("--beam-widths values must be in 2..16, got {}", k));
  std::vector<LengthDistribution> dists;
  for (const std::string& w : o.workloads) {
    if (w == "sharegpt") dists.push_back(scaled(sharegpt_like(), length_scale));
    else if (w == "alpaca") dists.push_back(scaled(alpaca_like(), length_scale));
    else throw ConfigError(fmt::format("unknown workload '{}' (sharegpt, alpaca)", w));
  }
  ModelConfig shape = paper_model_config();
  shape.seq_len = static_cast<int>(shape.seq_len * length_scale);
  const std::unique_ptr<Model> model = make_random_model(shape, o.seed);
  PaperSetup setup;
  setup.model = shape;
  setup.kv_cache_bytes = static_cast<size_t>(o.kv_mib * (1 << 20));
  setup.block_size = static_cast<int>(16 * length_scale);
  setup.cost = step_cost_preset(o.cost_preset);
  if (o.additive_linear) setup.cost.overlap_weight_read = false;
  setup.range_allocation = parse_range_allocation(o.range_allocation);
  setup.check_invariants = o.check_invariants;
  const size_t kv_per_token = static_cast<size_t>(shape.kv_dim()) * 2 * shape.n_layers * sizeof(float);
  // Block 0 is the null block.
  const size_t pool_tokens = (setup.kv_cache_bytes / (kv_per_token * setup.block_size) - 1) * setup.block_size;
  Bench bench{*model, setup, o, shape.seq_len, static_cast<double>(pool_tokens)};

  std::vector<WorkloadResult> results;
  for (const LengthDistribution& d : dists) results.push_back(bench.run(d));

  nlohmann::json j;
  j["setup"] = {{"model",
                 {{"dim", shape.dim},
                  {"hidden_dim", shape.hidden_dim},
                  {"n_layers", shape.n_layers},
                  {"n_heads", shape.n_heads},
                  {"n_kv_heads", shape.n_kv_heads},
                  {"vocab_size", shape.vocab_size},
                  {"seq_len", shape.seq_len}}},
                {"kv_bytes_per_token", kv_per_token},
                {"kv_cache_bytes", setup.kv_cache_bytes},
                {"pool_tokens", pool_tokens},
                {"block_size", setup.block_size},
                {"requests_per_run", o.requests},
                {"cost_model", setup.cost.name},
                {"cost_overlap_weight_read", setup.cost.overlap_weight_read},
                {"range_allocation", range_allocation_name(setup.range_allocation)},
                {"bisections", o.bisections},
                {"latency_limit_s_per_token", o.latency_limit},
                {"quick", o.quick}};
  j["workloads"] = nlohmann::json::array();
  for (const WorkloadResult& w : results) {
    nlohmann::json jw = {{"name", w.dist.name},
                         {"distribution",
                          {{"family", "lognormal"},
                           {"prompt_mean", w.dist.prompt_mean},
                           {"prompt_sigma", w.dist.prompt_sigma},
                           {"output_mean", w.dist.output_mean},
                           {"output_sigma", w.dist.output_sigma}}},
                         {"sample_mean_prompt", w.mean_prompt},
                         {"sample_mean_output", w.mean_output}};
    std::map<KVReservation, double> rate;
    for (size_t i = 0; i < w.curves.size(); ++i) {
      const Curve& c = w.curves[i];
      rate[c.policy] = c.sustained_rate;
      nlohmann::json jc = {{"policy", kv_reservation_name(c.policy)},
                           {"sustained_rate", c.sustained_rate},
                           {"bounded", c.bounded},
                           {"memory", memory_json(w.breakdown[i])},
                           {"memory_at_rate", w.breakdown[i].rate},
                           {"curve", nlohmann::json::array()}};
      for (const RunResult& r : c.points) jc["curve"].push_back(run_json(r));
      jw["policies"].push_back(jc);
    }
    jw["rate_ratio_vs_oracle"] = ratio(rate[KVReservation::kPaged], rate[KVReservation::kOracle]);
    jw["rate_ratio_vs_pow2"] = ratio(rate[KVReservation::kPaged], rate[KVReservation::kPow2]);
    jw["rate_ratio_vs_max"] = ratio(rate[KVReservation::kPaged], rate[KVReservation::kMax]);
    if (!w.curves.empty() && w.curves[0].policy == KVReservation::kPaged)
      jw["token_state_share_paged"] = w.breakdown[0].memory.token_state_share_of_used();
    for (const auto& s : w.sharing)
      jw["parallel_sampling"].push_back({{"n", s.n},
                                         {"rate", s.run.rate},
                                         {"memory_saving", sharing_saving(s.run)},
                                         {"logical_blocks", s.run.logical_blocks},
                                         {"physical_blocks", s.run.physical_blocks}});
    for (const auto& s : w.beam)
      jw["beam_search"].push_back({{"beam_width", s.n},
                                   {"rate", s.run.rate},
                                   {"memory_saving", sharing_saving(s.run)},
                                   {"logical_blocks", s.run.logical_blocks},
                                   {"physical_blocks", s.run.physical_blocks}});
    for (const auto& pr : w.prefixed)
      jw["shared_prefix"].push_back(
          {{"prefix_tokens", pr.prefix_tokens},
           {"paged_sustained_rate", pr.paged.sustained_rate},
           {"oracle_sustained_rate", pr.oracle.sustained_rate},
           {"rate_ratio_vs_oracle", ratio(pr.paged.sustained_rate, pr.oracle.sustained_rate)}});
    if (w.dist.name == "sharegpt")
      for (const char* k : {"rate_ratio_vs_oracle", "rate_ratio_vs_max", "token_state_share_paged"})
        if (jw.contains(k)) j[k] = jw[k];
    j["workloads"].push_back(jw);
  }
  if (!o.plot_dir.empty()) write_plots(o.plot_dir, results, o.latency_limit);
  if (o.json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "pagedkv bench paper{}: model dim {} x {} layers, {} B of KV per token; KV pool {:.0f} MiB = {} tokens "
      "(blocks of {}); {} requests per run; clock: {}; latency limit {} s/token; baselines' ranges: {}\n",
      o.quick ? " --quick" : "", shape.dim, shape.n_layers, kv_per_token, o.kv_mib, pool_tokens, setup.block_size,
      o.requests, setup.cost.name, o.latency_limit, range_allocation_name(setup.range_allocation));
  for (const nlohmann::json& jw : j["workloads"]) {
    fmt::print("\n{}-like (lognormal; sample means {:.0f} in / {:.0f} out)\n", jw["name"].get<std::string>(),
               jw["sample_mean_prompt"].get<double>(), jw["sample_mean_output"].get<double>());
    fmt::print("  {:<7} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}\n", "policy", "rate req/s", "tokens",
               "reserved", "internal", "external", "free", "running", "tok/used");
    for (const nlohmann::json& jc : jw["policies"]) {
      const nlohmann::json& m = jc["memory"];
      fmt::print("  {:<7} {:>9.3f}{} {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>8.1f} {:>8.1f}%\n",
                 jc["policy"].get<std::string>(), jc["sustained_rate"].get<double>(),
                 jc["bounded"].get<bool>() ? " " : "+", 100 * m["token_states"].get<double>(),
                 100 * m["reserved"].get<double>(), 100 * m["internal_fragmentation"].get<double>(),
                 100 * m["external_fragmentation"].get<double>(), 100 * m["free"].get<double>(),
                 m["mean_running"].get<double>(), 100 * m["token_state_share_of_used"].get<double>());
    }
    fmt::print(
        "  sustained rate, paged over: oracle {:.2f}x, pow2 {:.2f}x, max {:.2f}x (memory columns at {:.3f} req/s)\n",
        jw["rate_ratio_vs_oracle"].get<double>(), jw["rate_ratio_vs_pow2"].get<double>(),
        jw["rate_ratio_vs_max"].get<double>(), jw["policies"][0]["memory_at_rate"].get<double>());
    if (jw.contains("parallel_sampling"))
      for (const nlohmann::json& s : jw["parallel_sampling"])
        fmt::print("  parallel sampling n={}: sharing saves {:.1f}% of KV blocks (at {:.3f} req/s)\n",
                   s["n"].get<int>(), 100 * s["memory_saving"].get<double>(), s["rate"].get<double>());
    if (jw.contains("beam_search"))
      for (const nlohmann::json& s : jw["beam_search"])
        fmt::print("  beam search width {}: sharing saves {:.1f}% of KV blocks (at {:.3f} req/s)\n",
                   s["beam_width"].get<int>(), 100 * s["memory_saving"].get<double>(), s["rate"].get<double>());
    if (jw.contains("shared_prefix"))
      for (const nlohmann::json& s : jw["shared_prefix"])
        fmt::print("  shared {}-token prefix: paged {:.3f} req/s, oracle {:.3f} req/s: {:.2f}x\n",
                   s["prefix_tokens"].get<int>(), s["paged_sustained_rate"].get<double>(),
                   s["oracle_sustained_rate"].get<double>(), s["rate_ratio_vs_oracle"].get<double>());
  }
  return 0;
}

const CommandRegistration kBenchPaperCommand{Command{
    "bench paper", "the PagedAttention paper's Fig. 2, 12 and 14 on this engine: paged KV vs reservation baselines",
    [](CLI::App& sub) {
      auto o = std::make_shared<PaperOptions>();
      sub.add_flag("--quick", o->quick,
                   "CI-sized: lengths, context (512), block size (4) and pool (1.25 MiB) scaled down, 100 requests per "
                   "run, coarse search");
      sub.add_flag("--json", o->json, "print the results as JSON");
      sub.add_option("--requests", o->requests, "requests per run (default 1000; 100 with --quick)");
      sub.add_option("--kv-mib", o->kv_mib, "KV pool in MiB (default 16; 1.25 with --quick)");
      sub.add_option("--threads", o->threads, "kernel threads (the model is tiny: one is fastest)")
          ->capture_default_str();
      sub.add_option("--latency-limit", o->latency_limit,
                     "normalized latency (s per output token) a sustained rate meets")
          ->capture_default_str();
      sub.add_option("--cost-preset", o->cost_preset, "step cost model of the modelled clock")->capture_default_str();
      sub.add_option("--range-allocation", o->range_allocation,
                     "the baselines' contiguous ranges: buddy (the paper's assumption) or first-fit")
          ->capture_default_str();
      sub.add_option("--policies", o->policies, "which policies to run (ratios need paged)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option(
          "--start-rate", o->start_rate,
          "where the rate searches start (req/s; default near Orca (Max)'s capacity); baselines start at paged's "
          "sustained rate, or here when paged is not run");
      sub.add_flag("--additive-linear", o->additive_linear,
                   "ablation: a step pays the weight read plus the GEMMs instead of the longer of the two");
      sub.add_option("--bisections", o->bisections,
                     "bisections of each sustained-rate search (default 4; 2 with --quick)");
      sub.add_option("--workloads", o->workloads, "sharegpt, alpaca")->delimiter(',')->capture_default_str();
      sub.add_option("--parallel-n", o->parallel_n, "parallel sampling widths (Fig. 14)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--beam-widths", o->beam_widths, "beam search widths (Fig. 14)")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--parallel-workloads", o->parallel_workloads,
                     "workloads of the parallel sampling and beam search runs")
          ->delimiter(',')
          ->capture_default_str();
      sub.add_option("--plot-dir", o->plot_dir, "write gnuplot SVGs (Fig. 12 per workload, Fig. 2) here");
      sub.add_option("--prefix-tokens", o->prefix_tokens,
                     "shared prefix lengths of the Alpaca-like Fig. 16 runs (default 80,341; none with --quick)")
          ->delimiter(',')
          ->each([o](const std::string&) { o->prefix_tokens_given = true; });
      sub.add_flag("--check-invariants,--check", o->check_invariants,
                   "run the engine's checkers after every step (slow)")
          ->capture_default_str();
      sub.add_flag("-v,--verbose", o->verbose, "a line on stderr per run");
      sub.add_option("--seed", o->seed, "model weights and workload")->capture_default_str();
      return [o] { return run_paper(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
