// Core, block and prefix layers: KV-cache specs, block metadata, the low-level BlockPool, the
// block hasher and the prefix-key types a Request carries.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/block/kv_events.h"
#include "pagedkv/core/dtype.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/prefix/block_hasher.h"
#include "pagedkv/prefix/extra_keys.h"
#include "py_common.h"

namespace pagedkv::python {
namespace {

DType dtype_from_name(const std::string& name) {
  if (auto d = parse_dtype(name)) return *d;
  throw ConfigError(fmt::format("unknown dtype '{}' (expected fp32, fp16, bf16, fp8, int8 or int4)", name));
}

py::object hash_or_none(const KVCacheBlock& b) {
  return b.has_hash ? py::object(py::str(b.hash.hex())) : py::object(py::none());
}

std::vector<BlockId> to_block_ids(const std::vector<int32_t>& ids) {
  std::vector<BlockId> out;
  out.reserve(ids.size());
  for (int32_t i : ids) out.emplace_back(i);
  return out;
}

void bind_specs(py::module_& m) {
  py::enum_<AttentionKind>(m, "AttentionKind", "Which attention a KV-cache group serves.")
      .value("FULL", AttentionKind::kFull, "Every token attends to all earlier tokens; blocks are prefix-cacheable.")
      .value("SLIDING_WINDOW", AttentionKind::kSlidingWindow,
             "Tokens attend to the last `sliding_window` tokens; blocks that fall out are released.")
      .value("CROSS_ATTENTION", AttentionKind::kCrossAttention,
             "The decoder attends to a fixed encoder output; allocated once, never cached.");

  py::class_<KVCacheSpec>(m, "KVCacheSpec", "What one KV-cache group stores per token (vLLM's KVCacheSpec).")
      .def(py::init([](AttentionKind kind, int block_size, int num_kv_heads, int head_dim, const std::string& dtype,
                       int sliding_window) {
             KVCacheSpec s;
             s.kind = kind;
             s.block_size = block_size;
             s.num_kv_heads = num_kv_heads;
             s.head_dim = head_dim;
             s.dtype = dtype_from_name(dtype);
             s.sliding_window = sliding_window;
             s.validate();
             return s;
           }),
           py::kw_only(), py::arg("kind") = AttentionKind::kFull, py::arg("block_size") = 16,
           py::arg("num_kv_heads") = 1, py::arg("head_dim") = 1, py::arg("dtype") = "fp16",
           py::arg("sliding_window") = 0, "Raises ConfigError naming the bad field.")
      .def_readonly("kind", &KVCacheSpec::kind)
      .def_readonly("block_size", &KVCacheSpec::block_size)
      .def_readonly("num_kv_heads", &KVCacheSpec::num_kv_heads)
      .def_readonly("head_dim", &KVCacheSpec::head_dim)
      .def_property_readonly("dtype", [](const KVCacheSpec& s) { return std::string(dtype_name(s.dtype)); })
      .def_readonly("sliding_window", &KVCacheSpec::sliding_window)
      .def_property_readonly("bytes_per_token_per_layer", &KVCacheSpec::bytes_per_token_per_layer)
      .def_property_readonly("bytes_per_block_per_layer", &KVCacheSpec::bytes_per_block_per_layer,
                             "K plus V bytes of one block in one layer (vLLM's page_size_bytes).")
      .def("__repr__", [](const KVCacheSpec& s) {
        return fmt::format(
            "KVCacheSpec(kind={}, block_size={}, num_kv_heads={}, head_dim={}, dtype='{}', "
            "sliding_window={})",
            attention_kind_name(s.kind), s.block_size, s.num_kv_heads, s.head_dim, dtype_name(s.dtype),
            s.sliding_window);
      });

  py::class_<KVCacheGroupSpec>(m, "KVCacheGroupSpec",
                               "A set of layers that share one block table per request (vLLM's KVCacheGroupSpec).")
      .def(py::init([](const KVCacheSpec& spec, int num_layers) {
             return KVCacheGroupSpec{spec, num_layers};
           }),
           py::arg("spec"), py::arg("num_layers") = 1)
      .def_readonly("spec", &KVCacheGroupSpec::spec)
      .def_readonly("num_layers", &KVCacheGroupSpec::num_layers)
      .def("__repr__", [](const KVCacheGroupSpec& g) {
        return fmt::format("KVCacheGroupSpec({}, num_layers={})", std::string(py::repr(py::cast(g.spec))),
                           g.num_layers);
      });
}

void bind_blocks(py::module_& m) {
  py::class_<KVCacheBlock>(m, "KVCacheBlock",
                           "A snapshot of one physical block's metadata (who holds it, what it caches).")
      .def_property_readonly("block_id", [](const KVCacheBlock& b) { return b.id.value; })
      .def_readonly("ref_cnt", &KVCacheBlock::ref_cnt, "Block-table entries pointing here.")
      .def_property_readonly("block_hash", &hash_or_none, "Hex hash of the cached content, or None.")
      .def_readonly("is_null", &KVCacheBlock::is_null, "The reserved null block 0.")
      .def_readonly("in_free_queue", &KVCacheBlock::in_free_queue)
      .def_readonly("group", &KVCacheBlock::group)
      .def_readonly("hit_count", &KVCacheBlock::hit_count, "Prefix hits since it was cached.")
      .def("__repr__", [](const KVCacheBlock& b) {
        return fmt::format("KVCacheBlock(block_id={}, ref_cnt={}, cached={}, free={})", b.id.value, b.ref_cnt,
                           b.has_hash, b.in_free_queue);
      });

  py::class_<KVEvent>(m, "KVEvent",
                      "A prefix-cache change for routers and external indexes (vLLM's BlockStored / "
                      "BlockRemoved / AllBlocksCleared).")
      .def_property_readonly(
          "kind", [](const KVEvent& e) { return std::string(kv_event_kind_name(e.kind)); },
          "'stored', 'removed' or 'all_cleared'.")
      .def_property_readonly("block_hash", [](const KVEvent& e) { return e.hash.hex(); })
      .def_property_readonly(
          "parent_block_hash",
          [](const KVEvent& e) {
            return e.has_parent ? py::object(py::str(e.parent_hash.hex())) : py::object(py::none());
          },
          "Stored events: the previous block's hash (the root hash for a first block).")
      .def_readonly("token_count", &KVEvent::token_count)
      .def_property_readonly("block_id", [](const KVEvent& e) { return e.block.value; })
      .def_readonly("group", &KVEvent::group)
      .def_property_readonly(
          "attention_kind", [](const KVEvent& e) { return std::string(attention_kind_name(e.attention_kind)); },
          "The group's kind: 'full', 'sliding_window' or 'cross_attention'.")
      .def_readonly("sliding_window", &KVEvent::sliding_window, "The group's window in tokens (0 unless sliding).")
      .def_property_readonly(
          "reason", [](const KVEvent& e) { return std::string(removal_reason_name(e.reason)); },
          "Removed events: 'evicted' or 'reset'; otherwise 'none'.")
      .def_property_readonly(
          "medium", [](const KVEvent& e) { return std::string(medium_name(e.medium)); }, "'device', 'host' or 'disk'.")
      .def("__repr__", [](const KVEvent& e) {
        return fmt::format("KVEvent(kind='{}', block_hash='{}', block_id={}, reason='{}', medium='{}')",
                           kv_event_kind_name(e.kind), e.hash.hex(), e.block.value, removal_reason_name(e.reason),
                           medium_name(e.medium));
      });

  py::class_<BlockPoolStats>(m, "BlockPoolStats", "Counters of a block pool since it was created.")
      .def_readonly("allocated_blocks", &BlockPoolStats::allocated_blocks)
      .def_readonly("evictions", &BlockPoolStats::evictions, "Cached blocks whose content was dropped to reuse them.")
      .def_readonly("cached_blocks_stored", &BlockPoolStats::cached_blocks_stored)
      .def_readonly("reset_removals", &BlockPoolStats::reset_removals)
      .def_readonly("evicted_entries", &BlockPoolStats::evicted_entries,
                    "Evictions that dropped the last cached copy of a content.")
      .def_readonly("window_checkpoints_retained", &BlockPoolStats::window_checkpoints_retained,
                    "Sliding-window blocks freed as retention checkpoints (kept cached, at the back).")
      .def_readonly("window_blocks_slid_out", &BlockPoolStats::window_blocks_slid_out,
                    "Sliding-window blocks that left the window uncached, to the front of the free queue.")
      .def_readonly("window_checkpoints_evicted", &BlockPoolStats::window_checkpoints_evicted,
                    "Retention checkpoints later evicted to reuse their block.")
      .def("__repr__", [](const BlockPoolStats& s) {
        return fmt::format(
            "BlockPoolStats(allocated_blocks={}, evictions={}, cached_blocks_stored={}, reset_removals={})",
            s.allocated_blocks, s.evictions, s.cached_blocks_stored, s.reset_removals);
      });

  py::class_<ResetResult>(m, "ResetResult",
                          "What reset_prefix_cache() did. True when every cached entry was dropped "
                          "(vLLM returns that bool); blocks still in use keep theirs.")
      .def_readonly("removed", &ResetResult::removed)
      .def_readonly("kept_in_use", &ResetResult::kept_in_use)
      .def("__bool__", &ResetResult::complete)
      .def("__repr__", [](const ResetResult& r) {
        return fmt::format("ResetResult(removed={}, kept_in_use={})", r.removed, r.kept_in_use);
      });

  py::class_<BlockPool>(m, "BlockPool",
                        "The physical blocks on their own (vLLM's BlockPool): reference counts and the LRU "
                        "free queue, for callers that build their own manager. Block 0 is the reserved "
                        "null block. KVCacheManager owns a pool of its own; this one is independent.")
      .def(py::init([](int num_blocks, int block_size, bool enable_caching, bool enable_events) {
             BlockPoolOptions o;
             o.num_blocks = num_blocks;
             o.block_size = block_size;
             o.enable_caching = enable_caching;
             o.enable_events = enable_events;
             return std::make_unique<BlockPool>(std::move(o));
           }),
           py::kw_only(), py::arg("num_blocks"), py::arg("block_size") = 16, py::arg("enable_caching") = true,
           py::arg("enable_events") = false)
      .def_property_readonly("num_blocks", &BlockPool::num_blocks)
      .def_property_readonly("block_size", &BlockPool::block_size)
      .def_property_readonly("num_free_blocks", &BlockPool::num_free_blocks)
      .def_property_readonly("num_cached_blocks", &BlockPool::num_cached_blocks)
      .def_property_readonly("usage", &BlockPool::usage, "Fraction of usable blocks not free.")
      .def(
          "allocate",
          [](BlockPool& p, int n) -> py::object {
            std::vector<BlockId> out;
            if (!p.allocate(n, out)) return py::none();
            return block_ids_to_list(out.data(), out.size());
          },
          py::arg("n"),
          "Hands out n free blocks (ref 1 each), least recently freed first; None (nothing changed) "
          "when fewer than n are free.")
      .def(
          "touch", [](BlockPool& p, const std::vector<int32_t>& ids) { p.touch(to_block_ids(ids)); },
          py::arg("block_ids"), "Adds one reference to each block; a free block leaves the free queue.")
      .def(
          "free_blocks", [](BlockPool& p, const std::vector<int32_t>& ids) { p.free_blocks(to_block_ids(ids)); },
          py::arg("block_ids"),
          "Drops one reference from each block in the given order (pass a request's blocks tail first). "
          "Raises UsageError, changing nothing, on a double free or an id out of range.")
      .def(
          "block",
          [](const BlockPool& p, int32_t id) {
            if (id < 0 || id >= p.num_blocks())
              throw UsageError(fmt::format("block id {} out of range [0, {})", id, p.num_blocks()));
            return p.block(BlockId{id});
          },
          py::arg("block_id"), "A snapshot of one block's metadata.")
      .def_property_readonly("stats", &BlockPool::stats, py::return_value_policy::copy)
      .def("take_events", &BlockPool::take_events)
      .def("check_invariants", &BlockPool::check_invariants, "Raises InvariantError describing the first violation.");
}

void bind_prefix(py::module_& m) {
  py::class_<MultiModalInput>(m, "MultiModalInput",
                              "One image/audio/... input of a request: its content hash and the placeholder "
                              "tokens it occupies. Blocks overlapping it hash differently per content.")
      .def(py::init([](const py::object& hash, int32_t offset, int32_t length) {
             if (offset < 0 || length <= 0)
               throw UsageError(fmt::format("MultiModalInput: need offset >= 0 and length > 0, got offset {} length {}",
                                            offset, length));
             return MultiModalInput{to_block_hash(hash, "MultiModalInput.hash"), offset, length};
           }),
           py::arg("hash"), py::arg("offset"), py::arg("length"),
           "hash: an int in [0, 2**128) taken as is, or bytes/str digested with XXH3-128.")
      .def_property_readonly("hash", [](const MultiModalInput& mm) { return mm.hash.hex(); })
      .def_readonly("offset", &MultiModalInput::offset)
      .def_readonly("length", &MultiModalInput::length)
      .def("__repr__", [](const MultiModalInput& mm) {
        return fmt::format("MultiModalInput(hash='{}', offset={}, length={})", mm.hash.hex(), mm.offset, mm.length);
      });

  py::class_<BlockHasher>(m, "BlockHasher",
                          "Chained full-block hashing (hash(i) = H(hash(i-1) || tokens || extra keys)), "
                          "byte-identical to the hashes KVCacheManager caches under and reports in events.")
      .def(py::init([](int block_size, const std::string& algorithm, uint64_t seed) {
             auto a = parse_hash_algorithm(algorithm);
             if (!a)
               throw ConfigError(fmt::format("unknown hash algorithm '{}' (expected xxh3_128 or sha256)", algorithm));
             return BlockHasher(block_size, *a, seed);
           }),
           py::kw_only(), py::arg("block_size") = 16, py::arg("algorithm") = "xxh3_128", py::arg("seed") = 0)
      .def_property_readonly("block_size", &BlockHasher::block_size)
      .def_property_readonly("algorithm",
                             [](const BlockHasher& h) { return std::string(hash_algorithm_name(h.algorithm())); })
      .def_property_readonly("seed", &BlockHasher::seed)
      .def_property_readonly(
          "root", [](const BlockHasher& h) { return h.root().hex(); }, "Parent hash of block 0.")
      .def(
          "hash_tokens",
          [](const BlockHasher& self, const py::object& tokens, uint64_t lora_id, const std::string& cache_salt,
             std::vector<MultiModalInput> mm_inputs) {
            std::vector<TokenId> toks = to_tokens(tokens, "hash_tokens");
            std::sort(mm_inputs.begin(), mm_inputs.end(),
                      [](const MultiModalInput& a, const MultiModalInput& b) { return a.offset < b.offset; });
            std::vector<BlockHash> hashes;
            std::vector<uint64_t> digests;
            {
              // A private hasher (its scratch buffer is not shared) lets other threads run meanwhile.
              BlockHasher local = self;
              py::gil_scoped_release release;
              local.extend(toks, PrefixKeys{lora_id, mm_inputs, cache_salt}, hashes, digests);
            }
            py::list out(hashes.size());
            for (size_t i = 0; i < hashes.size(); ++i) out[i] = py::str(hashes[i].hex());
            return out;
          },
          py::arg("tokens"), py::kw_only(), py::arg("lora_id") = 0, py::arg("cache_salt") = "",
          py::arg("mm_inputs") = std::vector<MultiModalInput>{},
          "Hex hashes of every full block of `tokens` (the GIL is released while hashing).");
}

}  // namespace

void register_core(py::module_& m) {
  bind_specs(m);
  bind_blocks(m);
  bind_prefix(m);
}

}  // namespace pagedkv::python
