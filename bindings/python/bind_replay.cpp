// Replays that run entirely in C++, with the GIL released: serving traces through a prefix
// cache (Mooncake, Azure, token JSONL; docs/replay.md), and the native driver of kvcache-peer-v1,
// which benchmarks/python/bench_peer.py uses as its in-run baseline for the Python boundary.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>

#include "pagedkv/core/error.h"
#include "pagedkv/prefix/block_hasher.h"
#include "pagedkv/replay/cache_replay.h"
#include "pagedkv/replay/trace.h"
#include "pagedkv/replay/trace_reader.h"
#include "pagedkv/workload/kvcache_peer.h"
#include "py_common.h"

namespace pagedkv::python {
namespace {

HashAlgorithm hash_algorithm_arg(const std::string& name) {
  auto a = parse_hash_algorithm(name);
  if (!a) throw ConfigError(fmt::format("unknown hash_algorithm '{}' (expected xxh3_128 or sha256)", name));
  return *a;
}

py::dict cache_result_to_dict(const CacheReplayResult& r) {
  py::dict d;
  d["trace"] = r.trace;
  d["policy"] = r.policy;
  d["block_size"] = r.block_size;
  d["capacity_blocks"] = r.infinite() ? py::object(py::none()) : py::object(py::int_(r.capacity_blocks));
  d["pool_blocks"] = r.pool_blocks;
  d["requests"] = r.requests;
  d["unserved_requests"] = r.unserved_requests;
  d["requests_with_hit"] = r.requests_with_hit;
  d["prompt_tokens"] = r.prompt_tokens;
  d["prompt_blocks"] = r.prompt_blocks;
  d["hit_blocks"] = r.hit_blocks;
  d["hit_tokens"] = r.hit_tokens();
  d["block_hit_rate"] = r.block_hit_rate();
  d["token_hit_rate"] = r.token_hit_rate();
  d["request_hit_rate"] = r.request_hit_rate();
  d["evictions"] = r.evictions;
  d["evicted_blocks"] = r.evicted_blocks;
  d["allocated_blocks"] = r.allocated_blocks;
  d["cached_blocks"] = r.cached_blocks;
  d["block_ops"] = r.block_ops;
  d["seconds"] = r.seconds;
  d["cpu_seconds"] = r.cpu_seconds;
  return d;
}

py::dict peer_result_to_dict(const PeerResult& r) {
  const PeerCounters& c = r.counters;
  py::dict counters;
  counters["steps"] = c.steps;
  counters["preemptions"] = c.preemptions;
  counters["finished"] = c.finished;
  counters["admissions_ok"] = c.admissions_ok;
  counters["admissions_failed"] = c.admissions_failed;
  counters["decode_calls"] = c.decode_calls;
  counters["prefill_chunk_calls"] = c.prefill_chunk_calls;
  counters["evictions"] = c.evictions;
  counters["first_admission_hits"] = c.first_admission_hits;
  counters["first_admission_queries"] = c.first_admission_queries;
  counters["lookup_hits"] = c.lookup_hits;
  counters["lookup_queries"] = c.lookup_queries;
  counters["peak_running"] = c.peak_running;
  counters["free_blocks_at_end"] = c.free_blocks_at_end;
  const PeerTimings& t = r.timings;
  auto mean_us = [](double ns, uint64_t ops) { return ops ? ns / static_cast<double>(ops) / 1e3 : 0.0; };
  py::dict us;
  us["admit"] = mean_us(t.admit_ns, t.admit_ops);
  us["decode"] = mean_us(t.decode_ns, t.decode_ops);
  us["free"] = mean_us(t.free_ns, t.free_ops);
  us["hash"] = mean_us(t.hash_ns, t.hash_ops);
  us["prefill_chunk"] = mean_us(t.prefill_chunk_ns, t.prefill_chunk_ops);
  py::dict d;
  d["counters"] = counters;
  d["mean_us"] = us;
  d["whole_s"] = t.whole_replay_ns / 1e9;
  return d;
}

}  // namespace

void register_replay(py::module_& m) {
  py::class_<Trace, std::shared_ptr<Trace>>(m, "Trace", "A serving trace loaded for replay (read_trace).")
      .def_readonly("name", &Trace::name)
      .def_property_readonly("format", [](const Trace& t) { return std::string(trace_format_name(t.format)); })
      .def_readonly("total_input_tokens", &Trace::total_input_tokens)
      .def_readonly("total_output_tokens", &Trace::total_output_tokens)
      .def_readonly("skipped_lines", &Trace::skipped_lines)
      .def("__len__", &Trace::size)
      .def(
          "prompt_token_ids",
          [](const Trace& t, size_t i) {
            if (i >= t.size()) throw UsageError(fmt::format("request {} out of range [0, {})", i, t.size()));
            std::vector<TokenId> ids;
            t.append_prompt(i, ids);
            return ids;
          },
          py::arg("index"), "Request `index`'s prompt, rebuilt as token ids (equal content, equal ids).")
      .def("__repr__", [](const Trace& t) {
        return fmt::format("Trace(name='{}', format='{}', requests={})", t.name, trace_format_name(t.format), t.size());
      });

  m.def(
      "read_trace",
      [](const std::string& path, const std::string& format, bool lenient, int64_t limit) {
        TraceReadOptions o;
        auto f = parse_trace_format(format);
        if (!f) throw ConfigError(fmt::format("unknown trace format '{}' (mooncake, azure, tokens or auto)", format));
        o.format = *f;
        o.lenient = lenient;
        o.limit = limit;
        py::gil_scoped_release release;
        return std::make_shared<Trace>(read_trace(path, o));
      },
      py::arg("path"), py::kw_only(), py::arg("format") = "auto", py::arg("lenient") = false, py::arg("limit") = 0,
      "Reads a Mooncake JSONL, Azure CSV or pagedkv token JSONL trace (GIL released). FormatError names "
      "the file and line of a bad record.");

  m.def(
      "replay_cache",
      [](const std::shared_ptr<Trace>& trace, int block_size, std::optional<int64_t> capacity_blocks,
         const std::string& policy, const std::string& hash_algorithm) {
        CacheReplayConfig c;
        c.block_size = block_size;
        c.capacity_blocks = capacity_blocks.value_or(kInfiniteCapacity);
        c.policy = policy;
        c.hash_algorithm = hash_algorithm_arg(hash_algorithm);
        CacheReplayResult r;
        {
          py::gil_scoped_release release;
          r = replay_cache(*trace, c);
        }
        return cache_result_to_dict(r);
      },
      py::arg("trace"), py::kw_only(), py::arg("block_size") = 16, py::arg("capacity_blocks") = py::none(),
      py::arg("policy") = "lru", py::arg("hash_algorithm") = "xxh3_128",
      "The trace's requests in file order through one prefix cache of capacity_blocks usable blocks "
      "(None: unbounded) and eviction policy; returns hit rates, evictions and timings as a dict. "
      "Runs without the GIL.");

  m.def(
      "replay_peer",
      [](const std::string& scenario, const std::string& hash_algorithm) {
        const PeerScenario s = PeerScenario::by_name(scenario);
        const HashAlgorithm h = hash_algorithm_arg(hash_algorithm);
        PeerResult r;
        {
          py::gil_scoped_release release;
          r = replay_peer(PeerWorkload::generate(), s, h);
        }
        return peer_result_to_dict(r);
      },
      py::arg("scenario") = "A", py::arg("hash_algorithm") = "xxh3_128",
      "kvcache-peer-v1 replayed by the native C++ driver (what `pagedkv bench peer` runs), without the "
      "GIL: {'counters': ..., 'mean_us': per-category means, 'whole_s': an untimed replay}.");
}

}  // namespace pagedkv::python
