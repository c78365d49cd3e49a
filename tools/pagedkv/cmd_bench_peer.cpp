// pagedkv bench peer: replays kvcache-peer-v1 (../shared/workloads) with vLLM v1's semantics,
// checks the counters against vLLM's and compares per-operation time with vLLM's Python manager.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

#include "command.h"
#include "pagedkv/core/error.h"
#include "pagedkv/workload/kvcache_peer.h"

namespace pagedkv::cli {
namespace {

// vLLM v1's own Python KVCacheManager on this machine class (workloads/README.md), microseconds.
struct PythonPeer {
  double admit_us, decode_us, free_us, hash_us, whole_s;
};
constexpr PythonPeer kVllmSha256{156.5, 5.45, 18.9, 444.5, 3.50};
constexpr PythonPeer kVllmXxhash{130.2, 4.69, 16.8, 192.4, 2.56};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run_bench_peer(const std::string& scenario_name, const std::string& hash_name, int runs, bool json, bool check) {
  const PeerScenario scenario = PeerScenario::by_name(scenario_name);
  const auto hash = parse_hash_algorithm(hash_name);
  if (!hash) throw ConfigError(fmt::format("unknown hash algorithm '{}' (expected xxh3_128 or sha256)", hash_name));
  if (runs < 1) throw ConfigError(fmt::format("--runs must be at least 1, got {}", runs));
  const PeerWorkload w = PeerWorkload::generate();

  std::vector<double> admit, decode, free_, hashing, chunk, whole, whole_cpu;
  PeerCounters counters;
  for (int i = 0; i < runs; ++i) {
    PeerResult r = replay_peer(w, scenario, *hash, check && i == 0);
    counters = r.counters;
    const auto& t = r.timings;
    admit.push_back(t.admit_ns / static_cast<double>(std::max<uint64_t>(1, t.admit_ops)));
    decode.push_back(t.decode_ns / static_cast<double>(std::max<uint64_t>(1, t.decode_ops)));
    free_.push_back(t.free_ns / static_cast<double>(std::max<uint64_t>(1, t.free_ops)));
    hashing.push_back(t.hash_ns / static_cast<double>(std::max<uint64_t>(1, t.hash_ops)));
    chunk.push_back(t.prefill_chunk_ns / static_cast<double>(std::max<uint64_t>(1, t.prefill_chunk_ops)));
    whole.push_back(t.whole_replay_ns);
    whole_cpu.push_back(t.whole_replay_cpu_ns);
  }
  const bool has_reference = scenario.name == "A";
  const PeerCounters ref = peer_reference_counters_a();
  const bool match = has_reference && counters == ref;
  const PythonPeer& peer = *hash == HashAlgorithm::kSha256 ? kVllmSha256 : kVllmXxhash;
  const double m_admit = median(admit), m_decode = median(decode), m_free = median(free_),
               m_hash = median(hashing), m_chunk = median(chunk), m_whole = median(whole),
               m_whole_cpu = median(whole_cpu);

  if (json) {
    nlohmann::json j;
    j["scenario"] = scenario.name;
    j["hash"] = hash_algorithm_name(*hash);
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
                       {"prefill_chunk_allocate_slots", m_chunk / 1e3},
                       {"free", m_free / 1e3},
                       {"hash_prompt", m_hash / 1e3},
                       {"whole_replay", m_whole / 1e3},
                       {"whole_replay_cpu", m_whole_cpu / 1e3}};
    j["speedup_vs_vllm"] = {{"admit", peer.admit_us * 1e3 / m_admit},
                            {"decode_allocate_slots", peer.decode_us * 1e3 / m_decode},
                            {"free", peer.free_us * 1e3 / m_free},
                            {"hash_prompt", peer.hash_us * 1e3 / m_hash},
                            {"whole_replay", peer.whole_s * 1e9 / m_whole}};
    fmt::print("{}\n", j.dump(2));
    return has_reference && !match ? 1 : 0;
  }

  fmt::print("kvcache-peer-v1, scenario {}: {} blocks, max {} running, {} tokens/step, hash {}\n", scenario.name,
             scenario.num_blocks, scenario.max_num_seqs, scenario.max_num_batched_tokens, hash_algorithm_name(*hash));
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
  row("free blocks at the end", static_cast<uint64_t>(counters.free_blocks_at_end), static_cast<uint64_t>(ref.free_blocks_at_end));
  if (has_reference) fmt::print("counters {} vLLM v1's\n", match ? "match" : "DO NOT match");

  fmt::print("\nper operation (median of {} runs)       {:>12} {:>14} {:>10}\n", runs, "pagedkv", "vLLM v1 (py)", "speedup");
  auto trow = [](const char* name, double ours_ns, double theirs_us) {
    fmt::print("{:<40} {:>9.3f} µs {:>11.2f} µs {:>9.0f}x\n", name, ours_ns / 1e3, theirs_us, theirs_us * 1e3 / ours_ns);
  };
  trow("admit (lookup + allocate)", m_admit, peer.admit_us);
  trow("decode-step allocate_slots", m_decode, peer.decode_us);
  trow("free a request", m_free, peer.free_us);
  trow("hash a prompt's blocks at creation", m_hash, peer.hash_us);
  fmt::print("{:<40} {:>9.3f} µs\n", "prefill-chunk allocate_slots", m_chunk / 1e3);
  fmt::print("{:<40} {:>9.2f} ms {:>11.0f} ms {:>9.0f}x\n", "whole replay (hashing included)", m_whole / 1e6,
             peer.whole_s * 1e3, peer.whole_s * 1e9 / m_whole);
  fmt::print("{:<40} {:>9.2f} ms {:>11.0f} ms {:>9.0f}x\n", "whole replay, thread CPU time", m_whole_cpu / 1e6,
             peer.whole_s * 1e3, peer.whole_s * 1e9 / m_whole_cpu);
  fmt::print("(per-operation times are wall clock: on a busy machine they include time other processes ran)\n");
  fmt::print("(vLLM figures: its Python manager on a 2-core EPYC, workloads/README.md; absolute times drift, ratios matter)\n");
  return has_reference && !match ? 1 : 0;
}

const CommandRegistration kRegistration{Command{
    "bench peer", "replay kvcache-peer-v1 with vLLM v1 semantics: counters vs vLLM's, time per operation",
    [](CLI::App& sub) -> std::function<int()> {
      auto scenario = std::make_shared<std::string>("A");
      auto hash = std::make_shared<std::string>("xxh3_128");
      auto runs = std::make_shared<int>(5);
      auto json = std::make_shared<bool>(false);
      auto check = std::make_shared<bool>(false);
      sub.add_option("--scenario", *scenario, "A (4,096 blocks, 64 running) or B (2,048 blocks, 128 running)")
          ->capture_default_str();
      sub.add_option("--hash", *hash, "xxh3_128 or sha256")->capture_default_str();
      sub.add_option("--runs", *runs, "runs; timings are medians")->capture_default_str();
      sub.add_flag("--json", *json, "print JSON");
      sub.add_flag("--check", *check, "run the invariant checker after every operation (first run; slow)");
      return [=] { return run_bench_peer(*scenario, *hash, *runs, *json, *check); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
