// pagedkv bench peer: replays kvcache-peer-v1 (../shared/workloads) with vLLM v1's semantics,
// checks the counters against vLLM's and compares per-operation time with vLLM's Python manager.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "run_statistics.h"
#include "pagedkv/core/error.h"
#include "pagedkv/prefix/block_hasher.h"
#include "pagedkv/prefix/sha256.h"
#include "engine_options.h"
#include "pagedkv/storage/cpu_isa.h"
#include "pagedkv/workload/kvcache_peer.h"
#include "pagedkv/workload/python_peer_times.h"

namespace pagedkv::cli {
namespace {

// The 1, 5 and 15-minute load averages: a busy machine explains a slow run.
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (!(f >> a >> b >> c)) return "unknown";
  return fmt::format("{:.2f} {:.2f} {:.2f}", a, b, c);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown CPU";
}

std::string cpu_features() {
  const KernelIsa isa = best_available_isa();
  return fmt::format("SHA extensions {}, AVX2 {}, AVX-512 {}", sha256_hardware_available() ? "yes" : "no",
                     has_avx2(isa) ? "yes" : "no", isa == KernelIsa::kAvx512 ? "yes" : "no");
}

// vLLM v1's Python manager timed on scenario A, read from the workload's README (or the file
// --vllm-times names); nullopt, with the reason printed, when it cannot be read: the counters
// are still checked, the times are then reported without a ratio.
std::optional<PythonPeerReference> vllm_times(const std::string& path, HashAlgorithm hash, bool json) {
  try {
    return read_python_peer_times(path, hash);
  } catch (const Error& e) {
    if (!json) fmt::print(stderr, "bench peer: no comparison with vLLM's Python manager: {}\n", e.what());
    return std::nullopt;
  }
}

int run_bench_peer(const std::string& scenario_name, const std::string& hash_name, int runs, bool json, bool check,
                   const std::string& vllm_times_path) {
  const PeerScenario scenario = PeerScenario::by_name(scenario_name);
  const auto hash = parse_hash_algorithm(hash_name);
  if (!hash) throw ConfigError(fmt::format("unknown hash algorithm '{}' (expected xxh3_128 or sha256)", hash_name));
  if (runs < 1) throw ConfigError(fmt::format("--runs must be at least 1, got {}", runs));
  const PeerWorkload w = PeerWorkload::generate();

  const std::string load_before = load_average();
  std::vector<double> admit, decode, decode_new_block, free_, hashing, chunk, whole, whole_cpu;
  PeerCounters counters;
  for (int i = 0; i < runs; ++i) {
    PeerResult r = replay_peer(w, scenario, *hash, check && i == 0);
    counters = r.counters;
    const auto& t = r.timings;
    auto per_op = [](double ns, uint64_t ops) { return ns / static_cast<double>(std::max<uint64_t>(1, ops)); };
    admit.push_back(per_op(t.admit_ns, t.admit_ops));
    decode.push_back(per_op(t.decode_ns, t.decode_ops));
    decode_new_block.push_back(per_op(t.decode_new_block_ns, t.decode_new_block_ops));
    free_.push_back(per_op(t.free_ns, t.free_ops));
    hashing.push_back(per_op(t.hash_ns, t.hash_ops));
    chunk.push_back(per_op(t.prefill_chunk_ns, t.prefill_chunk_ops));
    whole.push_back(t.whole_replay_ns);
    whole_cpu.push_back(t.whole_replay_cpu_ns);
  }
  const std::string load_after = load_average();
  const bool has_reference = scenario.name == "A";
  const PeerCounters ref = peer_reference_counters_a();
  const bool match = has_reference && counters == ref;
  const std::optional<PythonPeerReference> vllm =
      has_reference ? vllm_times(vllm_times_path, *hash, json) : std::nullopt;
  const std::string implementation(BlockHasher(PeerWorkload::kBlockSize, *hash).implementation());
  const double m_admit = median(admit), m_decode = median(decode), m_decode_new_block = median(decode_new_block),
               m_free = median(free_), m_hash = median(hashing), m_chunk = median(chunk), m_whole = median(whole),
               m_whole_cpu = median(whole_cpu), min_whole = minimum(whole), min_whole_cpu = minimum(whole_cpu);

  if (json) {
    nlohmann::json j;
    j["scenario"] = scenario.name;
    j["hash"] = hash_algorithm_name(*hash);
    j["hash_implementation"] = implementation;
    j["cpu"] = cpu_model();
    j["cpu_features"] = cpu_features();
    j["load_average_before"] = load_before;
    j["load_average_after"] = load_after;
    j["runs"] = runs;
    j["workload"] = {{"total_prompt_tokens", w.total_prompt_tokens()},
                     {"rolling_checksum", fmt::format("{:#x}", w.rolling_checksum())}};
    j["counters"] = {{"steps", counters.steps},
                     {"preemptions", counters.preemptions},
                     {"finished", counters.finished},
                     {"admissions_ok", counters.admissions_ok},
                     {"admissions_failed", counters.admissions_failed},
                     {"decode_calls", counters.decode_calls},
                     {"prefill_chunk_calls", counters.prefill_chunk_calls},
                     {"evictions", counters.evictions},
                     {"first_admission_hits", counters.first_admission_hits},
                     {"first_admission_queries", counters.first_admission_queries},
                     {"lookup_hits", counters.lookup_hits},
                     {"lookup_queries", counters.lookup_queries},
                     {"peak_running", counters.peak_running},
                     {"free_blocks_at_end", counters.free_blocks_at_end}};
    if (has_reference) j["counters_match_vllm"] = match;
    j["timings_us"] = {{"admit", m_admit / 1e3},
                       {"decode_allocate_slots", m_decode / 1e3},
                       {"decode_allocate_slots_opening_a_block", m_decode_new_block / 1e3},
                       {"prefill_chunk_allocate_slots", m_chunk / 1e3},
                       {"free", m_free / 1e3},
                       {"hash_prompt", m_hash / 1e3},
                       {"whole_replay", m_whole / 1e3},
                       {"whole_replay_min", min_whole / 1e3},
                       {"whole_replay_cpu", m_whole_cpu / 1e3},
                       {"whole_replay_cpu_min", min_whole_cpu / 1e3}};
    auto us = [](const PythonPeerTimes& t) {
      return nlohmann::json{{"admit", t.admit_us},
                            {"decode_allocate_slots", t.decode_us},
                            {"free", t.free_us},
                            {"hash_prompt", t.hash_us},
                            {"whole_replay", t.whole_s * 1e6}};
    };
    if (vllm) {
      const PythonPeerTimes& peer = vllm->current;
      j["vllm_times_source"] = vllm_times_path;
      j["vllm_us"] = us(peer);
      if (vllm->first) j["vllm_first_measurement_us"] = us(*vllm->first);
      j["speedup_vs_vllm"] = {
          {"admit", peer.admit_us * 1e3 / m_admit},       {"decode_allocate_slots", peer.decode_us * 1e3 / m_decode},
          {"free", peer.free_us * 1e3 / m_free},          {"hash_prompt", peer.hash_us * 1e3 / m_hash},
          {"whole_replay", peer.whole_s * 1e9 / m_whole}, {"whole_replay_best", peer.whole_s * 1e9 / min_whole}};
    }
    fmt::print("{}\n", j.dump(2));
    return has_reference && !match ? 1 : 0;
  }

  fmt::print("kvcache-peer-v1, scenario {}: {} blocks, max {} running, {} tokens/step\n", scenario.name,
             scenario.num_blocks, scenario.max_num_seqs, scenario.max_num_batched_tokens);
  fmt::print("hash: {}\n", implementation);
  fmt::print("cpu: {} ({})\n", cpu_model(), cpu_features());
  fmt::print("load average: {} before, {} after\n", load_before, load_after);
  fmt::print("workload: {} prompt tokens, checksum {:#x}\n\n", w.total_prompt_tokens(), w.rolling_checksum());
  fmt::print("{:<44} {:>12} {:>12}\n", "counter", "pagedkv", has_reference ? "vLLM v1" : "");
  auto row = [&](const char* name, uint64_t ours, uint64_t theirs) {
    fmt::print("{:<44} {:>12} {:>12}{}\n", name, ours, has_reference ? fmt::format("{}", theirs) : "",
               has_reference && ours != theirs ? "  MISMATCH" : "");
  };
  row("steps", counters.steps, ref.steps);
  row("preemptions", counters.preemptions, ref.preemptions);
  row("finished", counters.finished, ref.finished);
  row("successful admissions", counters.admissions_ok, ref.admissions_ok);
  row("failed admissions", counters.admissions_failed, ref.admissions_failed);
  row("decode allocate_slots calls", counters.decode_calls, ref.decode_calls);
  row("prefill-chunk calls", counters.prefill_chunk_calls, ref.prefill_chunk_calls);
  row("cached blocks evicted", counters.evictions, ref.evictions);
  row("hit tokens at first admission", counters.first_admission_hits, ref.first_admission_hits);
  row("query tokens at first admission", counters.first_admission_queries, ref.first_admission_queries);
  row("hit tokens over every lookup", counters.lookup_hits, ref.lookup_hits);
  row("query tokens over every lookup", counters.lookup_queries, ref.lookup_queries);
  row("peak running", counters.peak_running, ref.peak_running);
  row("free blocks at the end", static_cast<uint64_t>(counters.free_blocks_at_end),
      static_cast<uint64_t>(ref.free_blocks_at_end));
  if (has_reference) fmt::print("counters {} vLLM v1's\n", match ? "match" : "DO NOT match");

  // Our times always; vLLM's beside them (and the ratio) when its figures could be read.
  const PythonPeerTimes* peer = vllm ? &vllm->current : nullptr;
  auto ratio = [](double theirs, double ours) { return fmt::format("{:>8.0f}x", theirs / ours); };
  fmt::print("\nwhole replay, hashing included ({} runs)   {:>9} {:>9} {:>12} {:>9} {:>9}\n", runs, "median", "min",
             "vLLM v1 (py)", "vs median", "vs min");
  auto wrow = [&](const char* name, double med_ns, double min_ns) {
    fmt::print("{:<40} {:>6.2f} ms {:>6.2f} ms {} {} {}\n", name, med_ns / 1e6, min_ns / 1e6,
               peer ? fmt::format("{:>9.0f} ms", peer->whole_s * 1e3) : fmt::format("{:>12}", "-"),
               peer ? ratio(peer->whole_s * 1e9, med_ns) : "", peer ? ratio(peer->whole_s * 1e9, min_ns) : "");
  };
  wrow("wall clock", m_whole, min_whole);
  wrow("thread CPU time", m_whole_cpu, min_whole_cpu);

  fmt::print("\nper operation (median of {} runs' means)  {:>12} {:>14} {:>9}\n", runs, "pagedkv", "vLLM v1 (py)",
             "speedup");
  auto trow = [&](const char* name, double ours_ns, double PythonPeerTimes::*field) {
    if (!peer) return fmt::print("{:<40} {:>9.3f} µs\n", name, ours_ns / 1e3);
    fmt::print("{:<40} {:>9.3f} µs {:>11.2f} µs {}\n", name, ours_ns / 1e3, peer->*field,
               ratio(peer->*field * 1e3, ours_ns));
  };
  trow("admit (lookup + allocate)", m_admit, &PythonPeerTimes::admit_us);
  trow("decode-step allocate_slots", m_decode, &PythonPeerTimes::decode_us);
  trow("free a request", m_free, &PythonPeerTimes::free_us);
  trow("hash a prompt's blocks at creation", m_hash, &PythonPeerTimes::hash_us);
  fmt::print("{:<40} {:>9.3f} µs\n", "  decode steps that opened a block", m_decode_new_block / 1e3);
  fmt::print("{:<40} {:>9.3f} µs\n", "prefill-chunk allocate_slots", m_chunk / 1e3);
  fmt::print(
      "(per-operation times: a TSC read around each call, ~7 ns of it the timer; wall clock, so on a busy\n"
      " machine they include time other processes ran. The whole replay is a run without those timers.)\n");
  if (peer)
    fmt::print(
        "(vLLM figures: its Python manager as measured in {}, on another machine than\n"
        " this one: compare ratios, and expect drift.)\n",
        vllm_times_path);
  return has_reference && !match ? 1 : 0;
}

const CommandRegistration kBenchPeerCommand{
    Command{"bench peer", "replay kvcache-peer-v1 with vLLM v1 semantics: counters vs vLLM's, time per operation",
            [](CLI::App& sub) -> std::function<int()> {
              auto scenario = std::make_shared<std::string>("A");
              auto hash = std::make_shared<std::string>("xxh3_128");
              auto runs = std::make_shared<int>(5);
              auto json = std::make_shared<bool>(false);
              auto check = std::make_shared<bool>(false);
              auto times = std::make_shared<std::string>(default_shared_dir() + "/workloads/README.md");
              sub.add_option("--scenario", *scenario, "A (4,096 blocks, 64 running) or B (2,048 blocks, 128 running)")
                  ->capture_default_str();
              sub.add_option("--hash", *hash, "xxh3_128 or sha256")->capture_default_str();
              sub.add_option("--runs", *runs, "runs; timings are medians")->capture_default_str();
              sub.add_flag("--json", *json, "print JSON");
              sub.add_flag("--check-invariants,--check", *check,
                           "run the invariant checker after every operation (first run; slow)");
              sub.add_option("--vllm-times", *times,
                             "where vLLM's Python manager times are read from (its \"Python peers' speed\" table)")
                  ->capture_default_str();
              return [=] { return run_bench_peer(*scenario, *hash, *runs, *json, *check, *times); };
            }}};

}  // namespace
}  // namespace pagedkv::cli
