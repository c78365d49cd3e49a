// The manager layer: Request, KVCacheBlocks (cached prefix blocks found by a lookup), AllocStatus
// and KVCacheManager itself, with vLLM v1's method names and argument order so a Python
// scheduler written against vLLM's KVCacheManager can call it unchanged.
//
// Threading: manager calls are microseconds and keep the GIL, which is also what serializes
// them (a manager is not thread-safe). Only hashing of long token runs, which works on a
// private copy, releases it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "pagedkv/block/eviction_policies.h"
#include "pagedkv/core/error.h"
#include "pagedkv/manager/kv_cache_manager.h"
#include "pagedkv/manager/request.h"
#include "fast_path.h"
#include "py_common.h"

namespace pagedkv::python {
namespace {

// Hashing fewer tokens than this keeps the GIL: releasing it and copying the request would
// cost more than the hashing itself.
constexpr int kReleaseGilHashTokens = 4096;

// The entries of a per-group array (sized for kMaxKVCacheGroups) that belong to the cache's
// `num_groups` groups, as a Python list.
template <class T, size_t N>
std::vector<T> first_groups(const std::array<T, N>& per_group, int num_groups) {
  return std::vector<T>(per_group.begin(), per_group.begin() + num_groups);
}

// KVCacheManager plus the little state the Python API adds on top.
struct PyKVCacheManager {
  explicit PyKVCacheManager(KVCacheManagerConfig config)
      : manager(std::move(config)), block_ints(static_cast<size_t>(manager.pool().num_blocks()), nullptr) {}
  PyKVCacheManager(const PyKVCacheManager&) = delete;
  PyKVCacheManager& operator=(const PyKVCacheManager&) = delete;
  ~PyKVCacheManager() {
    for (PyObject* o : block_ints) Py_XDECREF(o);  // pybind11 deallocates instances with the GIL held
  }

  // Block id `b` as a Python int (a new reference). Ids above CPython's small-int cache would
  // otherwise be a fresh object each time: an admission returns ~50 of them.
  PyObject* block_int(BlockId b) {
    PyObject*& o = block_ints[static_cast<size_t>(b.value)];
    if (!o && !(o = PyLong_FromLong(b.value))) return nullptr;
    Py_INCREF(o);
    return o;
  }

  KVCacheManager manager;
  bool last_table_rewritten = false;  // of the last successful allocate_slots
  std::vector<PyObject*> block_ints;  // per block id, created on first use
  // KVCacheBlocks objects get_computed_blocks hands out again once only the manager holds them
  // (no allocation, and their tables keep their capacity). Two, because a scheduler loop still
  // holds the previous lookup's result when it makes the next one.
  std::array<py::object, 2> spare_computed;
};

// ---- Request --------------------------------------------------------------------------------

Request make_request(uint64_t request_id, const py::object& prompt, const std::optional<std::string>& cache_salt,
                     uint64_t lora_id, std::vector<MultiModalInput> mm_inputs, int num_encoder_tokens,
                     bool skip_prefix_cache) {
  Request r(RequestId{request_id}, to_tokens(prompt, "Request.prompt_token_ids"));
  r.cache_salt = cache_salt.value_or("");
  r.lora_id = lora_id;
  std::sort(mm_inputs.begin(), mm_inputs.end(),
            [](const MultiModalInput& a, const MultiModalInput& b) { return a.offset < b.offset; });
  for (const MultiModalInput& mm : mm_inputs)
    if (static_cast<int64_t>(mm.offset) + mm.length > r.num_prompt_tokens)
      throw UsageError(fmt::format("Request {}: multimodal input at offset {} length {} runs past the {}-token prompt",
                                   request_id, mm.offset, mm.length, r.num_prompt_tokens));
  r.mm_inputs = std::move(mm_inputs);
  if (num_encoder_tokens < 0)
    throw UsageError(
        fmt::format("Request {}: num_encoder_tokens must not be negative, got {}", request_id, num_encoder_tokens));
  r.num_encoder_tokens = num_encoder_tokens;
  r.skip_prefix_cache = skip_prefix_cache;
  return r;
}

py::list token_slice(const Request& r, size_t begin, size_t end) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(end - begin));
  if (!list) throw py::error_already_set();
  for (size_t i = begin; i < end; ++i)
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i - begin), PyLong_FromLong(r.tokens[i]));
  return py::reinterpret_steal<py::list>(list);
}

void append_token_checked(Request& r, long long t) {
  if (t < std::numeric_limits<TokenId>::min() || t > std::numeric_limits<TokenId>::max())
    throw UsageError(fmt::format("Request {}: token id {} does not fit in int32", r.id.value, t));
  r.append_token(static_cast<TokenId>(t));
}

// Hashes the request's missing full blocks. Long runs are hashed on a copy without the GIL;
// a request only ever grows, so the copied prefix is still the request's prefix afterwards.
void hash_request(const KVCacheManager& m, Request& r) {
  if (!m.pool().caching_enabled()) return;
  const size_t full_blocks = static_cast<size_t>(r.num_tokens() / m.block_size());
  if (r.block_hashes.size() >= full_blocks) return;
  const size_t missing_tokens = (full_blocks - r.block_hashes.size()) * static_cast<size_t>(m.block_size());
  if (missing_tokens < static_cast<size_t>(kReleaseGilHashTokens)) {
    m.hash_request(r);
    return;
  }
  const size_t had = r.block_hashes.size();
  std::vector<TokenId> tokens(r.tokens.begin(),
                              r.tokens.begin() + static_cast<ptrdiff_t>(full_blocks) * m.block_size());
  std::vector<BlockHash> hashes = r.block_hashes;
  std::vector<uint64_t> digests = r.block_extra_digests;
  std::string salt = r.cache_salt;
  std::vector<MultiModalInput> mm = r.mm_inputs;
  BlockHasher hasher = m.hasher();
  {
    py::gil_scoped_release release;
    hasher.extend(tokens, PrefixKeys{r.lora_id, mm, salt}, hashes, digests);
  }
  if (r.block_hashes.size() == had) {  // nobody hashed it meanwhile
    r.block_hashes = std::move(hashes);
    r.block_extra_digests = std::move(digests);
  }
}

void bind_request(py::module_& m) {
  py::class_<Request>(m, "Request",
                      "What the manager needs to know about a request: token ids (prompt, then outputs), how "
                      "many have KV (maintained by the caller, as vLLM's scheduler does) and the keys that "
                      "decide which cached blocks it may share. Block hashes are filled in lazily.")
      .def(py::init(&make_request), py::arg("request_id"), py::arg("prompt_token_ids"), py::kw_only(),
           py::arg("cache_salt") = py::none(), py::arg("lora_id") = 0,
           py::arg("mm_inputs") = std::vector<MultiModalInput>{}, py::arg("num_encoder_tokens") = 0,
           py::arg("skip_prefix_cache") = false,
           "request_id: a non-negative int, unique among the live requests of one manager.\n"
           "prompt_token_ids: a sequence of ints or a 1-D integer NumPy array.\n"
           "cache_salt: requests with different salts never share blocks.\n"
           "mm_inputs: MultiModalInput list (any order; sorted by offset).")
      .def_property_readonly("num_output_tokens", [](const Request& r) { return r.num_tokens() - r.num_prompt_tokens; })
      .def_property_readonly(
          "prompt_token_ids",
          [](const Request& r) { return token_slice(r, 0, static_cast<size_t>(r.num_prompt_tokens)); })
      .def_property_readonly(
          "output_token_ids",
          [](const Request& r) { return token_slice(r, static_cast<size_t>(r.num_prompt_tokens), r.tokens.size()); })
      .def_property_readonly("all_token_ids", [](const Request& r) { return token_slice(r, 0, r.tokens.size()); })
      .def_property_readonly("cache_salt",
                             [](const Request& r) {
                               return r.cache_salt.empty() ? py::object(py::none()) : py::object(py::str(r.cache_salt));
                             })
      .def_readonly("lora_id", &Request::lora_id)
      .def_readonly("mm_inputs", &Request::mm_inputs)
      .def_readwrite("num_encoder_tokens", &Request::num_encoder_tokens,
                     "Encoder output length, for cross-attention groups.")
      .def_readwrite("num_preemptions", &Request::num_preemptions,
                     "Times the request was preempted; the caller increments it (as vLLM's scheduler "
                     "does). Lookups by a preempted request are counted apart in prefix_cache_stats.")
      .def_readwrite("skip_prefix_cache", &Request::skip_prefix_cache,
                     "Neither look up nor cache this request's blocks (e.g. it needs prompt logprobs).")
      .def_property_readonly(
          "block_hashes",
          [](const Request& r) {
            py::list out(r.block_hashes.size());
            for (size_t i = 0; i < r.block_hashes.size(); ++i) out[i] = py::str(r.block_hashes[i].hex());
            return out;
          },
          "Hex hashes of the full blocks hashed so far.")
      .def(
          "append_tokens", [](Request& r, const py::object& ids) { append_tokens(ids, "append_tokens", r.tokens); },
          py::arg("token_ids"), "Appends output tokens (a sequence of ints or an integer NumPy array).")
      .def(
          "append_output_token_ids",
          [](Request& r, const py::object& ids) {
            if (PyLong_Check(ids.ptr())) append_token_checked(r, ids.cast<long long>());
            else append_tokens(ids, "append_output_token_ids", r.tokens);
          },
          py::arg("token_ids"), "vLLM's name: appends one token id or a sequence of them.")
      .def("__len__", &Request::num_tokens)
      .def("__repr__", [](const Request& r) {
        return fmt::format("Request(request_id={}, num_tokens={}, num_prompt_tokens={}, num_computed_tokens={})",
                           r.id.value, r.num_tokens(), r.num_prompt_tokens, r.num_computed_tokens);
      });
}

// ---- results ---------------------------------------------------------------------------------

py::tuple blocks_per_group(int num_groups, const std::array<std::span<const BlockId>, kMaxKVCacheGroups>& blocks) {
  PyObject* t = PyTuple_New(num_groups);
  if (!t) throw py::error_already_set();
  py::tuple out = py::reinterpret_steal<py::tuple>(t);
  for (int g = 0; g < num_groups; ++g) {
    const auto& b = blocks[static_cast<size_t>(g)];
    PyTuple_SET_ITEM(t, g, block_ids_to_list(b.data(), b.size()).release().ptr());
  }
  return out;
}

py::tuple computed_block_ids(const ComputedBlocks& c) {
  std::array<std::span<const BlockId>, kMaxKVCacheGroups> spans;
  for (size_t g = 0; g < kMaxKVCacheGroups; ++g) spans[g] = c.blocks[g];
  return blocks_per_group(c.num_groups, spans);
}

void bind_results(py::module_& m) {
  py::enum_<AllocStatus>(m, "AllocStatus", "vLLM v0's admission answer.")
      .value("OK", AllocStatus::kOk, "Fits now (with the watermark kept free).")
      .value("LATER", AllocStatus::kLater, "Fits once running requests release blocks.")
      .value("NEVER", AllocStatus::kNever, "Larger than the cache (or max_model_len) can ever hold.");

  py::class_<ComputedBlocks>(m, "KVCacheBlocks",
                             "Cached prefix blocks a lookup found, per KV-cache group (vLLM's KVCacheBlocks). "
                             "Pass it back to allocate_slots as new_computed_blocks.")
      .def_readonly("num_computed_tokens", &ComputedBlocks::num_computed_tokens, "Tokens the blocks cover.")
      .def_readonly("num_groups", &ComputedBlocks::num_groups)
      .def("get_block_ids", &computed_block_ids, "Block ids per group: tuple[list[int], ...].")
      .def_property_readonly(
          "group_hit_tokens", [](const ComputedBlocks& c) { return first_groups(c.group_hit_tokens, c.num_groups); },
          "Per group: the prefix it confirmed on its own (hybrid models; list[int]).")
      .def_property_readonly(
          "limiting_group",
          [](const ComputedBlocks& c) {
            return c.limiting_group < 0 ? py::object(py::none()) : py::object(py::int_(c.limiting_group));
          },
          "The group that cut the hit short of the others' (None: none did).")
      .def("__repr__", [](const ComputedBlocks& c) {
        return fmt::format("KVCacheBlocks(num_groups={}, num_blocks={}, num_computed_tokens={})", c.num_groups,
                           c.blocks[0].size(), c.num_computed_tokens);
      });

  py::class_<PrefixCacheStats>(m, "PrefixCacheStats",
                               "Prefix-cache lookups since the manager was created, split as vLLM splits them: "
                               "requests never preempted, and (preempted_*) requests re-admitted after a "
                               "preemption, whose own earlier blocks would inflate the hit rate.")
      .def_readonly("requests", &PrefixCacheStats::requests, "Lookups (get_computed_blocks calls).")
      .def_readonly("queries", &PrefixCacheStats::queries, "Tokens looked up.")
      .def_readonly("hits", &PrefixCacheStats::hits, "Tokens found cached.")
      .def_readonly("hit_requests", &PrefixCacheStats::hit_requests, "Lookups that found at least one block.")
      .def_readonly("preempted_requests", &PrefixCacheStats::preempted_requests)
      .def_readonly("preempted_queries", &PrefixCacheStats::preempted_queries)
      .def_readonly("preempted_hits", &PrefixCacheStats::preempted_hits)
      .def_property_readonly("hit_rate", &PrefixCacheStats::hit_rate, "hits / queries (preempted lookups excluded).")
      .def_property_readonly(
          "group_hit_tokens", [](const PrefixCacheStats& s) { return first_groups(s.group_hit_tokens, s.num_groups); },
          "Per group: tokens it confirmed on its own, summed over lookups (list[int]).")
      .def_property_readonly(
          "limited_by_group", [](const PrefixCacheStats& s) { return first_groups(s.limited_by_group, s.num_groups); },
          "Per group: lookups whose hit that group cut short (list[int]).")
      .def_readonly("window_search_probes", &PrefixCacheStats::window_search_probes,
                    "Cache probes of the sliding-window groups' right-to-left search.")
      .def("__repr__", [](const PrefixCacheStats& s) {
        return fmt::format(
            "PrefixCacheStats(requests={}, queries={}, hits={}, hit_rate={:.4f}, preempted_requests={}, "
            "preempted_queries={}, preempted_hits={})",
            s.requests, s.queries, s.hits, s.hit_rate(), s.preempted_requests, s.preempted_queries, s.preempted_hits);
      });
}

// ---- KVCacheManager --------------------------------------------------------------------------

KVCacheManagerConfig make_config(int num_blocks, std::optional<int> block_size, int max_model_len, bool enable_caching,
                                 const std::string& hash_algorithm, uint64_t hash_seed, double watermark,
                                 bool enable_events, int num_kv_heads, int head_dim, const std::string& dtype,
                                 int num_layers, std::optional<int> sliding_window,
                                 std::optional<std::vector<KVCacheGroupSpec>> groups,
                                 const std::string& eviction_policy) {
  KVCacheManagerConfig c;
  c.eviction_policy = make_eviction_policy(eviction_policy);  // null for "lru": the pool's own queue
  c.cache.num_blocks = num_blocks;
  if (groups) {
    if (groups->empty()) throw ConfigError("groups must not be empty");
    if (sliding_window) throw ConfigError("pass sliding_window inside a KVCacheGroupSpec when groups is given");
    c.cache.groups = *groups;
    if (block_size && *block_size != c.cache.block_size())
      throw ConfigError(
          fmt::format("block_size {} disagrees with the groups' block size {}", *block_size, c.cache.block_size()));
  } else {
    KVCacheSpec s;
    s.kind = sliding_window ? AttentionKind::kSlidingWindow : AttentionKind::kFull;
    s.block_size = block_size.value_or(16);
    s.num_kv_heads = num_kv_heads;
    s.head_dim = head_dim;
    auto d = parse_dtype(dtype);
    if (!d) throw ConfigError(fmt::format("unknown dtype '{}' (expected fp32, fp16, bf16, fp8, int8 or int4)", dtype));
    s.dtype = *d;
    s.sliding_window = sliding_window.value_or(0);
    c.cache.groups.push_back(KVCacheGroupSpec{s, num_layers});
  }
  c.max_model_len = max_model_len;
  c.enable_caching = enable_caching;
  auto algo = parse_hash_algorithm(hash_algorithm);
  if (!algo)
    throw ConfigError(fmt::format("unknown hash_algorithm '{}' (expected xxh3_128 or sha256)", hash_algorithm));
  c.hash_algorithm = *algo;
  c.hash_seed = hash_seed;
  c.watermark = watermark;
  c.enable_events = enable_events;
  return c;
}

py::tuple block_ids_of(const PyKVCacheManager& self, RequestId id) {
  const int n = self.manager.num_groups();
  PyObject* t = PyTuple_New(n);
  if (!t) throw py::error_already_set();
  py::tuple out = py::reinterpret_steal<py::tuple>(t);
  for (int g = 0; g < n; ++g) {
    auto ids = self.manager.get_block_ids(id, g);
    PyTuple_SET_ITEM(t, g, block_ids_to_list(ids.data(), ids.size()).release().ptr());
  }
  return out;
}

void bind_kv_cache_manager(py::module_& m) {
  using M = PyKVCacheManager;
  py::class_<M>(m, "KVCacheManager",
                "The scheduler's whole view of KV memory (vLLM v1's KVCacheManager, plus v0's can_allocate "
                "with a watermark, fork and copy-on-write). It never touches KV bytes: it says which "
                "physical block holds each request's tokens, and copy-on-write yields (src, dst) pairs "
                "for whoever owns the bytes.")
      .def(py::init([](int num_blocks, std::optional<int> block_size, int max_model_len, bool enable_caching,
                       const std::string& hash_algorithm, uint64_t hash_seed, double watermark, bool enable_events,
                       int num_kv_heads, int head_dim, const std::string& dtype, int num_layers,
                       std::optional<int> sliding_window, std::optional<std::vector<KVCacheGroupSpec>> groups,
                       const std::string& eviction_policy) {
             return std::make_unique<M>(make_config(num_blocks, block_size, max_model_len, enable_caching,
                                                    hash_algorithm, hash_seed, watermark, enable_events, num_kv_heads,
                                                    head_dim, dtype, num_layers, sliding_window, std::move(groups),
                                                    eviction_policy));
           }),
           py::kw_only(), py::arg("num_blocks"), py::arg("block_size") = py::none(), py::arg("max_model_len") = 0,
           py::arg("enable_caching") = true, py::arg("hash_algorithm") = "xxh3_128", py::arg("hash_seed") = 0,
           py::arg("watermark") = 0.01, py::arg("enable_events") = false, py::arg("num_kv_heads") = 1,
           py::arg("head_dim") = 1, py::arg("dtype") = "fp16", py::arg("num_layers") = 1,
           py::arg("sliding_window") = py::none(), py::arg("groups") = py::none(), py::arg("eviction_policy") = "lru",
           "num_blocks counts the reserved null block 0 (num_blocks - 1 are usable).\n"
           "block_size: tokens per block (default 16, or the groups' block size).\n"
           "max_model_len: longest sequence; 0 = what the pool can hold.\n"
           "hash_algorithm: 'xxh3_128' or 'sha256'; hash_seed is part of the configuration.\n"
           "watermark: fraction of blocks can_allocate keeps free.\n"
           "sliding_window: make the single group a sliding-window group of that many tokens.\n"
           "groups: explicit KV-cache groups (hybrid models, cross-attention); replaces the per-group\n"
           "keywords.\n"
           "eviction_policy: which cached free block is reused first: 'lru' (vLLM's order), 'lfu', "
           "'s3fifo' or 'length-aware' (pagedkv.eviction_policies()). Raises ConfigError naming the bad value.")
      .def(
          "can_allocate", [](M& self, Request& request) { return self.manager.can_allocate(request); },
          py::arg("request"), "v0 admission check with the watermark: AllocStatus.OK, LATER or NEVER.")
      .def(
          "fork", [](M& self, const Request& parent, const Request& child) { self.manager.fork(parent, child); },
          py::arg("parent"), py::arg("child"),
          "Parallel sampling / beam search: child shares all of parent's blocks. The first write into a "
          "shared block copies it (copy-on-write; see take_pending_copies).")
      .def(
          "take_pending_copies",
          [](M& self) {
            auto copies = self.manager.take_pending_copies();
            py::list out(copies.size());
            for (size_t i = 0; i < copies.size(); ++i)
              out[i] = py::make_tuple(copies[i].first.value, copies[i].second.value);
            return out;
          },
          "Copy-on-write (src, dst) block pairs queued since the last call; copy the bytes before running "
          "the step.")
      .def_property_readonly("has_pending_copies", [](const M& self) { return self.manager.has_pending_copies(); })
      .def(
          "get_block_ids", [](const M& self, const Request& r) { return block_ids_of(self, r.id); }, py::arg("request"),
          "The request's block table per group: tuple[list[int], ...] (empty lists if unknown).")
      .def(
          "get_block_ids", [](const M& self, uint64_t request_id) { return block_ids_of(self, RequestId{request_id}); },
          py::arg("request_id"))
      .def(
          "has_request", [](const M& self, uint64_t id) { return self.manager.has_request(RequestId{id}); },
          py::arg("request_id"))
      .def_property_readonly("num_requests", [](const M& self) { return self.manager.num_requests(); })
      .def_property_readonly(
          "last_table_rewritten", [](const M& self) { return self.last_table_rewritten; },
          "Whether the last successful allocate_slots changed entries before its new blocks "
          "(copy-on-write, sliding-window release): a worker-side table must re-read the "
          "whole row instead of appending.")
      .def(
          "hash_request", [](const M& self, Request& request) { hash_request(self.manager, request); },
          py::arg("request"),
          "Computes the request's missing full-block hashes now (vLLM hashes at request creation; lookups "
          "do it lazily otherwise). Long runs are hashed with the GIL released.")
      .def(
          "reset_prefix_cache", [](M& self) { return self.manager.reset_prefix_cache(); },
          "Drops every cached entry not in use; truthy when the cache is now empty.")
      .def_property_readonly("num_cached_blocks", [](const M& self) { return self.manager.pool().num_cached_blocks(); })
      .def_property_readonly("prefix_cache_stats", [](const M& self) { return self.manager.prefix_cache_stats(); })
      .def(
          "group_block_size",
          [](const M& self, int group) {
            if (group < 0 || group >= self.manager.num_groups())
              throw UsageError(fmt::format("group {} out of range [0, {})", group, self.manager.num_groups()));
            return self.manager.group_block_size(group);
          },
          py::arg("group"), "Tokens a block of that group holds (groups may differ: pages match).")
      .def_property_readonly(
          "hit_alignment", [](const M& self) { return self.manager.hit_alignment(); },
          "Prefix hits are multiples of this many tokens (the lcm of the groups' block sizes).")
      .def_property_readonly(
          "pool_stats", [](const M& self) { return self.manager.pool().stats(); },
          "allocated_blocks, evictions, cached_blocks_stored, reset_removals.")
      .def(
          "take_events", [](M& self) { return self.manager.take_events(); },
          "KVEvents since the last call (empty unless enable_events).")
      .def(
          "block",
          [](const M& self, int32_t id) {
            const BlockPool& p = self.manager.pool();
            if (id < 0 || id >= p.num_blocks())
              throw UsageError(fmt::format("block id {} out of range [0, {})", id, p.num_blocks()));
            return p.block(BlockId{id});
          },
          py::arg("block_id"), "A snapshot of one block's metadata (ref_cnt, cached hash, ...).")
      .def(
          "check_invariants", [](const M& self) { self.manager.check_invariants(); },
          "Validates the pool and every block's ref count against the block tables; raises InvariantError.")
      .def_property_readonly("num_blocks", [](const M& self) { return self.manager.pool().num_blocks(); })
      .def_property_readonly("block_size", [](const M& self) { return self.manager.block_size(); })
      .def_property_readonly("max_model_len", [](const M& self) { return self.manager.max_model_len(); })
      .def_property_readonly("num_groups", [](const M& self) { return self.manager.num_groups(); })
      .def_property_readonly("watermark_blocks", [](const M& self) { return self.manager.watermark_blocks(); })
      .def_property_readonly("enable_caching", [](const M& self) { return self.manager.pool().caching_enabled(); })
      .def_property_readonly(
          "hash_algorithm",
          [](const M& self) { return std::string(hash_algorithm_name(self.manager.hasher().algorithm())); })
      .def_property_readonly("groups", [](const M& self) { return self.manager.cache_config().groups; })
      .def_property_readonly("eviction_policy",
                             [](const M& self) { return std::string(self.manager.pool().policy_name()); })
      .def("__repr__", [](const M& self) {
        return fmt::format("KVCacheManager(num_blocks={}, block_size={}, num_free_blocks={}, num_requests={})",
                           self.manager.pool().num_blocks(), self.manager.block_size(), self.manager.num_free_blocks(),
                           self.manager.num_requests());
      });
}

// ---- fast path (see fast_path.h): the per-step calls ---------------------------------------

PyTypeObject* g_request_type = nullptr;
PyTypeObject* g_manager_type = nullptr;
PyTypeObject* g_computed_blocks_type = nullptr;
// allocate_slots' answer when no group gained a block (most decode steps), one per group
// count: immutable, so it is shared instead of built per call.
PyObject* g_no_new_blocks[kMaxKVCacheGroups + 1] = {};

PyObject* new_blocks_tuple(PyKVCacheManager& self, const NewBlocks& r) {
  bool any = false;
  for (int g = 0; g < r.num_groups; ++g) any = any || !r.blocks[static_cast<size_t>(g)].empty();
  if (!any) {
    PyObject* shared = g_no_new_blocks[r.num_groups];
    Py_INCREF(shared);
    return shared;
  }
  PyObject* out = PyTuple_New(r.num_groups);
  if (!out) return nullptr;
  for (int g = 0; g < r.num_groups; ++g) {
    const auto& ids = r.blocks[static_cast<size_t>(g)];
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(ids.size()));
    if (!t) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, g, t);
    for (size_t i = 0; i < ids.size(); ++i) {
      PyObject* id = self.block_int(ids[i]);
      if (!id) {
        Py_DECREF(out);
        return nullptr;
      }
      PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), id);
    }
  }
  return out;
}

PyObject* fast_allocate_slots(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const kNames[] = {
      "request",           "num_new_tokens", "num_new_computed_tokens", "new_computed_blocks", "num_lookahead_tokens",
      "delay_cache_blocks"};
  constexpr const char* fn = "allocate_slots";
  constexpr long kMin = std::numeric_limits<int>::min(), kMax = std::numeric_limits<int>::max();
  PyObject* a[6];
  if (!parse_fastcall(fn, args, nargs, kwnames, kNames, 6, 2, a)) return nullptr;
  auto* self_ = unwrap<PyKVCacheManager>(self, g_manager_type, "self");
  auto* request = self_ ? unwrap<Request>(a[0], g_request_type, "allocate_slots(): request") : nullptr;
  if (!request) return nullptr;
  int num_new_tokens = 0, num_new_computed_tokens = 0, num_lookahead_tokens = 0;
  if (!arg_to_int(a[1], fn, kNames[1], kMin, kMax, &num_new_tokens)) return nullptr;
  if (a[2] && !arg_to_int(a[2], fn, kNames[2], kMin, kMax, &num_new_computed_tokens)) return nullptr;
  if (a[4] && !arg_to_int(a[4], fn, kNames[4], kMin, kMax, &num_lookahead_tokens)) return nullptr;
  const ComputedBlocks* computed = nullptr;
  if (a[3] && a[3] != Py_None) {
    computed = unwrap<ComputedBlocks>(a[3], g_computed_blocks_type, "allocate_slots(): new_computed_blocks");
    if (!computed) return nullptr;
  }
  bool delay_cache_blocks = false;
  if (a[5]) {
    const int t = PyObject_IsTrue(a[5]);
    if (t < 0) return nullptr;
    delay_cache_blocks = t != 0;
  }
  try {
    auto r = self_->manager.allocate_slots(*request, num_new_tokens, num_new_computed_tokens, computed,
                                           num_lookahead_tokens, delay_cache_blocks);
    if (!r) Py_RETURN_NONE;
    self_->last_table_rewritten = r->table_rewritten;
    return new_blocks_tuple(*self_, *r);
  } catch (...) {
    set_python_error_from_current_exception();
    return nullptr;
  }
}

PyObject* fast_free(PyObject* self, PyObject* arg) {
  auto* self_ = unwrap<PyKVCacheManager>(self, g_manager_type, "self");
  auto* request = self_ ? unwrap<Request>(arg, g_request_type, "free(): request") : nullptr;
  if (!request) return nullptr;
  try {
    return PyBool_FromLong(self_->manager.free(*request));
  } catch (...) {
    set_python_error_from_current_exception();
    return nullptr;
  }
}

// A KVCacheBlocks object for a lookup's answer: a spare that nobody else references, or a new one.
py::object spare_computed_blocks(PyKVCacheManager& self) {
  for (py::object& spare : self.spare_computed) {
    if (!spare) {
      ComputedBlocks fresh;
      fresh.blocks[0].reserve(static_cast<size_t>(self.manager.max_model_len() / self.manager.block_size()));
      spare = py::cast(std::move(fresh));
      return spare;
    }
    if (Py_REFCNT(spare.ptr()) == 1) return spare;
  }
  return py::cast(ComputedBlocks{});  // both still held by the caller
}

PyObject* fast_get_computed_blocks(PyObject* self, PyObject* arg) {
  auto* self_ = unwrap<PyKVCacheManager>(self, g_manager_type, "self");
  auto* request = self_ ? unwrap<Request>(arg, g_request_type, "get_computed_blocks(): request") : nullptr;
  if (!request) return nullptr;
  try {
    py::object blocks = spare_computed_blocks(*self_);
    auto* c = unwrap<ComputedBlocks>(blocks.ptr(), g_computed_blocks_type, "KVCacheBlocks");
    if (!c) return nullptr;
    self_->manager.get_computed_blocks(*request, *c);
    PyObject* hit = PyLong_FromLong(c->num_computed_tokens);
    if (!hit) return nullptr;
    PyObject* out = PyTuple_New(2);
    if (!out) {
      Py_DECREF(hit);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, 0, blocks.release().ptr());
    PyTuple_SET_ITEM(out, 1, hit);
    return out;
  } catch (...) {
    set_python_error_from_current_exception();
    return nullptr;
  }
}

PyObject* fast_get_num_blocks_to_allocate(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const kNames[] = {"request", "num_tokens", "new_computed_blocks"};
  constexpr const char* fn = "get_num_blocks_to_allocate";
  PyObject* a[3];
  if (!parse_fastcall(fn, args, nargs, kwnames, kNames, 3, 2, a)) return nullptr;
  auto* self_ = unwrap<PyKVCacheManager>(self, g_manager_type, "self");
  auto* request = self_ ? unwrap<Request>(a[0], g_request_type, "get_num_blocks_to_allocate(): request") : nullptr;
  if (!request) return nullptr;
  int num_tokens = 0;
  if (!arg_to_int(a[1], fn, kNames[1], 0, std::numeric_limits<int>::max(), &num_tokens)) return nullptr;
  const ComputedBlocks* computed = nullptr;
  if (a[2] && a[2] != Py_None) {
    computed =
        unwrap<ComputedBlocks>(a[2], g_computed_blocks_type, "get_num_blocks_to_allocate(): new_computed_blocks");
    if (!computed) return nullptr;
  }
  try {
    return PyLong_FromLong(self_->manager.get_num_blocks_to_allocate(*request, num_tokens, computed));
  } catch (...) {
    set_python_error_from_current_exception();
    return nullptr;
  }
}

PyObject* get_num_free_blocks(PyObject* self, void*) {
  auto* self_ = unwrap<PyKVCacheManager>(self, g_manager_type, "self");
  return self_ ? PyLong_FromLong(self_->manager.num_free_blocks()) : nullptr;
}
PyObject* get_usage(PyObject* self, void*) {
  auto* self_ = unwrap<PyKVCacheManager>(self, g_manager_type, "self");
  return self_ ? PyFloat_FromDouble(self_->manager.usage()) : nullptr;
}

PyGetSetDef g_manager_getsets[] = {
    {"num_free_blocks", &get_num_free_blocks, nullptr, "Blocks in the free queue (cached ones included).", nullptr},
    {"usage", &get_usage, nullptr, "Fraction of usable blocks not free (vLLM's usage).", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMethodDef g_manager_methods[] = {
    {"get_computed_blocks", &fast_get_computed_blocks, METH_O,
     "get_computed_blocks($self, request)\n--\n\n"
     "Prefix lookup: (KVCacheBlocks, num_computed_tokens), the longest run of cached full blocks\n"
     "from the start of the request (at most num_tokens - 1 tokens). Touches nothing; counts the\n"
     "lookup in prefix_cache_stats (apart when request.num_preemptions > 0, as vLLM does)."},
    {"get_num_blocks_to_allocate",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_get_num_blocks_to_allocate)),
     METH_FASTCALL | METH_KEYWORDS,
     "get_num_blocks_to_allocate($self, request, num_tokens, new_computed_blocks=None)\n--\n\n"
     "Blocks allocate_slots would take from the free queue for the request to hold num_tokens\n"
     "slots after taking new_computed_blocks (cached free hits and copy-on-write copies included)."},
    {"allocate_slots", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_allocate_slots)),
     METH_FASTCALL | METH_KEYWORDS,
     "allocate_slots($self, request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None, "
     "num_lookahead_tokens=0, delay_cache_blocks=False)\n--\n\n"
     "Reserves slots for num_new_tokens more tokens (plus lookahead), taking new_computed_blocks\n"
     "(from get_computed_blocks, covering num_new_computed_tokens) as the request's prefix at\n"
     "admission. Returns the block ids each group gained, as tuple[tuple[int, ...], ...], or None\n"
     "with nothing changed when the pool cannot supply them (cached free blocks the request is about\n"
     "to reuse count as unavailable). Full blocks up to the scheduled tokens are cached."},
    {"free", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast_free)), METH_O,
     "free($self, request)\n--\n\n"
     "Releases every block of the request, tail first (its private tail is evicted before its\n"
     "shared head). Returns False if the manager held nothing for it: freeing a request that never\n"
     "got blocks, or freeing it twice, is a no-op as in vLLM."},
    {nullptr, nullptr, 0, nullptr}};

Request* request_of(PyObject* self) { return unwrap<Request>(self, g_request_type, "self"); }

PyObject* get_request_id(PyObject* self, void*) {
  Request* r = request_of(self);
  return r ? PyLong_FromUnsignedLongLong(r->id.value) : nullptr;
}
PyObject* get_num_tokens(PyObject* self, void*) {
  Request* r = request_of(self);
  return r ? PyLong_FromLong(r->num_tokens()) : nullptr;
}
PyObject* get_num_prompt_tokens(PyObject* self, void*) {
  Request* r = request_of(self);
  return r ? PyLong_FromLong(r->num_prompt_tokens) : nullptr;
}
PyObject* get_num_computed_tokens(PyObject* self, void*) {
  Request* r = request_of(self);
  return r ? PyLong_FromLong(r->num_computed_tokens) : nullptr;
}
int set_num_computed_tokens(PyObject* self, PyObject* value, void*) {
  Request* r = request_of(self);
  if (!r) return -1;
  if (!value) {
    PyErr_SetString(PyExc_AttributeError, "num_computed_tokens cannot be deleted");
    return -1;
  }
  int v = 0;
  if (!arg_to_int(value, "Request.num_computed_tokens", "value", std::numeric_limits<int>::min(),
                  std::numeric_limits<int>::max(), &v))
    return -1;
  if (v < 0 || v > r->num_tokens()) {
    set_usage_error(
        fmt::format("Request {}: num_computed_tokens must be in [0, {}], got {}", r->id.value, r->num_tokens(), v));
    return -1;
  }
  r->num_computed_tokens = v;
  return 0;
}

PyObject* fast_append_token(PyObject* self, PyObject* arg) {
  Request* r = request_of(self);
  if (!r) return nullptr;
  int t = 0;
  if (!arg_to_int(arg, "append_token", "token_id", std::numeric_limits<TokenId>::min(),
                  std::numeric_limits<TokenId>::max(), &t))
    return nullptr;
  try {
    r->append_token(static_cast<TokenId>(t));
  } catch (...) {
    set_python_error_from_current_exception();
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyGetSetDef g_request_getsets[] = {
    {"request_id", &get_request_id, nullptr, "The caller-chosen id (a non-negative int).", nullptr},
    {"num_tokens", &get_num_tokens, nullptr, "Prompt plus output tokens so far.", nullptr},
    {"num_prompt_tokens", &get_num_prompt_tokens, nullptr, "Prompt tokens.", nullptr},
    {"num_computed_tokens", &get_num_computed_tokens, &set_num_computed_tokens,
     "Tokens whose KV is (or is being) written. The caller advances it after each step and sets it\n"
     "to 0 on preemption, as vLLM's scheduler does; it must stay within [0, num_tokens].",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMethodDef g_request_methods[] = {
    {"append_token", &fast_append_token, METH_O, "append_token($self, token_id)\n--\n\nAppends one output token."},
    {nullptr, nullptr, 0, nullptr}};

void install_fast_paths(const py::handle& request_cls, const py::handle& computed_cls, const py::handle& manager_cls) {
  g_request_type = reinterpret_cast<PyTypeObject*>(request_cls.ptr());
  g_computed_blocks_type = reinterpret_cast<PyTypeObject*>(computed_cls.ptr());
  g_manager_type = reinterpret_cast<PyTypeObject*>(manager_cls.ptr());
  for (int g = 0; g <= kMaxKVCacheGroups; ++g) {
    PyObject* t = PyTuple_New(g);
    if (!t) throw py::error_already_set();
    for (int i = 0; i < g; ++i) {
      PyObject* empty = PyTuple_New(0);
      PyTuple_SET_ITEM(t, i, empty);
    }
    g_no_new_blocks[g] = t;  // lives as long as the process, like the module
  }
  for (PyGetSetDef* d = g_request_getsets; d->name; ++d) add_getset(request_cls, d);
  for (PyMethodDef* d = g_request_methods; d->ml_name; ++d) add_method(request_cls, d);
  for (PyMethodDef* d = g_manager_methods; d->ml_name; ++d) add_method(manager_cls, d);
  for (PyGetSetDef* d = g_manager_getsets; d->name; ++d) add_getset(manager_cls, d);
}

}  // namespace

void register_manager(py::module_& m) {
  m.def(
      "eviction_policies",
      [] {
        std::vector<std::string> names;
        for (std::string_view n : eviction_policy_names()) names.emplace_back(n);
        return names;
      },
      "Names KVCacheManager(eviction_policy=...) accepts; 'lru' is vLLM's free-queue order.");
  bind_request(m);
  bind_results(m);
  bind_kv_cache_manager(m);
  install_fast_paths(m.attr("Request"), m.attr("KVCacheBlocks"), m.attr("KVCacheManager"));
}

}  // namespace pagedkv::python
