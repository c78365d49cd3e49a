// The memory math: bytes per token and block, blocks in a budget, concurrency, and the whole
// plan `pagedkv plan` prints (pagedkv.plan), for sizing a KV cache from Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/memory/gpu_spec.h"
#include "pagedkv/memory/kv_memory.h"
#include "pagedkv/memory/memory_plan.h"
#include "pagedkv/memory/model_shape.h"
#include "py_common.h"

namespace pagedkv::python {
namespace {

uint64_t size_arg(const py::handle& v, const char* name) {
  if (PyLong_Check(v.ptr())) {
    const long long b = v.cast<long long>();
    if (b < 0) throw ConfigError(fmt::format("{} must not be negative, got {}", name, b));
    return static_cast<uint64_t>(b);
  }
  if (PyUnicode_Check(v.ptr())) return parse_byte_size(v.cast<std::string>());
  throw ConfigError(fmt::format("{} must be a byte count or a size string like '40GiB'", name));
}

DType dtype_arg(const std::string& s, const char* name) {
  if (auto d = parse_dtype(s)) return *d;
  throw ConfigError(fmt::format("{}: unknown dtype '{}' (fp32, fp16, bf16, fp8, int8, int4)", name, s));
}

// A preset name (exact, then case-insensitive), else a config.json path or a folder holding one.
ModelShape resolve_model(const py::handle& model) {
  if (py::isinstance<ModelShape>(model)) return model.cast<ModelShape>();
  const std::string name = py::str(model);
  for (const ModelShape& preset : model_presets())
    if (preset.name == name) return preset;
  const std::filesystem::path path(name);
  if (std::filesystem::exists(path) || path.extension() == ".json") return load_hf_config(path);
  return model_preset(name);  // case-insensitive match, or the error listing every preset
}

py::dict plan_to_dict(const MemoryPlan& p) {
  py::dict d;
  d["model"] = p.model.name;
  d["num_layers"] = p.model.num_layers;
  d["num_kv_heads"] = p.model.num_kv_heads;
  d["head_dim"] = p.model.head_dim;
  d["num_params"] = p.model.num_params;
  d["block_size"] = p.spec.block_size;
  d["kv_dtype"] = std::string(dtype_name(p.spec.dtype));
  d["sliding_window"] = p.model.sliding_window ? py::object(py::int_(*p.model.sliding_window)) : py::object(py::none());
  d["bytes_per_token"] = p.bytes_per_token;
  d["bytes_per_block_per_layer"] = p.bytes_per_block_per_layer;
  d["bytes_per_block"] = p.bytes_per_block;
  d["kv_memory_bytes"] = p.kv_memory_bytes;
  if (p.gpu) {
    py::dict g;
    g["name"] = p.gpu->gpu.name;
    g["memory_bytes"] = p.gpu->gpu.memory_bytes;
    g["gpu_memory_utilization"] = p.gpu->gpu_memory_utilization;
    g["weights_dtype"] = std::string(dtype_name(p.gpu->weights_dtype));
    g["weights_bytes"] = p.gpu->weights_bytes;
    g["overhead_bytes"] = p.gpu->overhead_bytes;
    d["gpu"] = g;
  } else {
    d["gpu"] = py::none();
  }
  d["num_blocks"] = p.num_blocks;
  d["token_capacity"] = p.token_capacity;
  d["context_len"] = p.context_len;
  d["blocks_per_request"] = p.blocks_per_request;
  d["max_concurrency"] = p.max_concurrency;
  d["swap_space_bytes"] = p.swap_space_bytes;
  d["num_cpu_blocks"] = p.num_cpu_blocks;
  return d;
}

}  // namespace

void register_memory(py::module_& m) {
  py::class_<ModelShape>(m, "ModelShape", "The architecture numbers that decide KV-cache and weight memory.")
      .def_readonly("name", &ModelShape::name)
      .def_readonly("num_layers", &ModelShape::num_layers)
      .def_readonly("num_q_heads", &ModelShape::num_q_heads)
      .def_readonly("num_kv_heads", &ModelShape::num_kv_heads)
      .def_readonly("head_dim", &ModelShape::head_dim)
      .def_readonly("hidden_size", &ModelShape::hidden_size)
      .def_readonly("intermediate_size", &ModelShape::intermediate_size)
      .def_readonly("num_experts", &ModelShape::num_experts)
      .def_readonly("vocab_size", &ModelShape::vocab_size)
      .def_readonly("num_params", &ModelShape::num_params)
      .def_readonly("max_position_embeddings", &ModelShape::max_position_embeddings)
      .def_readonly("sliding_window", &ModelShape::sliding_window)
      .def_property_readonly("dtype",
                             [](const ModelShape& s) -> std::optional<std::string> {
                               if (!s.dtype) return std::nullopt;
                               return std::string(dtype_name(*s.dtype));
                             })
      .def(
          "kv_cache_spec",
          [](const ModelShape& s, int block_size, const std::string& kv_dtype) {
            return s.kv_cache_spec(block_size, dtype_arg(kv_dtype, "kv_dtype"));
          },
          py::arg("block_size") = 16, py::arg("kv_dtype") = "fp16")
      .def("__repr__", [](const ModelShape& s) {
        return fmt::format("ModelShape(name='{}', num_layers={}, num_kv_heads={}, head_dim={}, num_params={})", s.name,
                           s.num_layers, s.num_kv_heads, s.head_dim, s.num_params);
      });

  py::class_<GpuSpec>(m, "GpuSpec")
      .def_readonly("name", &GpuSpec::name)
      .def_readonly("description", &GpuSpec::description)
      .def_readonly("memory_bytes", &GpuSpec::memory_bytes);

  m.def(
      "model_presets", [] { return std::vector<ModelShape>(model_presets().begin(), model_presets().end()); },
      "The built-in model presets, in a fixed order.");
  m.def("gpu_presets", [] { return std::vector<GpuSpec>(gpu_presets().begin(), gpu_presets().end()); });
  m.def(
      "load_hf_config", [](const std::string& path) { return load_hf_config(path); }, py::arg("path"),
      "Reads a Hugging Face config.json (or a folder holding one) into a ModelShape.");

  m.def("kv_bytes_per_token", &kv_bytes_per_token, py::arg("spec"), py::arg("num_layers"),
        "K plus V bytes of one token across num_layers layers.");
  m.def("kv_bytes_per_block", &kv_bytes_per_block, py::arg("spec"), py::arg("num_layers"),
        "Bytes one physical block takes across num_layers layers (vLLM's cache_block_size).");
  m.def("blocks_per_request", static_cast<int64_t (*)(const KVCacheSpec&, int64_t)>(&blocks_per_request),
        py::arg("spec"), py::arg("context_len"),
        "Blocks one request of context_len tokens holds at its largest (sliding windows release older ones).");
  m.def("max_concurrency", &max_concurrency, py::arg("num_blocks"), py::arg("spec"), py::arg("context_len"),
        "Requests of context_len tokens that fit at once (vLLM's 'Maximum concurrency').");
  m.def(
      "num_gpu_blocks_vllm",
      [](const py::object& total, double utilization, const py::object& peak, size_t bytes_per_block) {
        return num_gpu_blocks_vllm(size_arg(total, "total_gpu_bytes"), utilization, size_arg(peak, "peak_bytes"),
                                   bytes_per_block);
      },
      py::arg("total_gpu_bytes"), py::arg("gpu_memory_utilization"), py::arg("peak_bytes"), py::arg("bytes_per_block"),
      "vLLM's block count after profiling: floor((total x utilization - peak) / bytes_per_block).");
  m.def("parse_byte_size", &parse_byte_size, py::arg("text"), "'43GB' = 43e9 bytes, '40GiB' = 40 x 2**30 bytes.");
  m.def("format_byte_size", &format_byte_size, py::arg("bytes"));

  m.def(
      "plan",
      [](const py::object& model, const py::object& kv_memory, const std::optional<std::string>& gpu,
         double gpu_memory_utilization, const std::optional<std::string>& weights_dtype, const py::object& overhead,
         int block_size, const std::optional<std::string>& kv_dtype, std::optional<int64_t> context_len,
         const py::object& swap_space) {
        if (kv_memory.is_none() == !gpu.has_value())
          throw UsageError("plan: give exactly one of kv_memory (a byte budget) or gpu (a preset name)");
        PlanOptions o;
        o.block_size = block_size;
        if (kv_dtype) o.kv_dtype = dtype_arg(*kv_dtype, "kv_dtype");
        if (!kv_memory.is_none()) o.kv_memory_bytes = size_arg(kv_memory, "kv_memory");
        if (gpu) {
          o.gpu = gpu_preset(*gpu);
          o.gpu_memory_utilization = gpu_memory_utilization;
          if (weights_dtype) o.weights_dtype = dtype_arg(*weights_dtype, "weights_dtype");
          o.overhead_bytes = size_arg(overhead, "overhead");
        }
        o.swap_space_bytes = size_arg(swap_space, "swap_space");
        o.context_len = context_len;
        return plan_to_dict(plan_memory(resolve_model(model), o));
      },
      py::arg("model"), py::kw_only(), py::arg("kv_memory") = py::none(), py::arg("gpu") = py::none(),
      py::arg("gpu_memory_utilization") = kDefaultGpuMemoryUtilization, py::arg("weights_dtype") = py::none(),
      py::arg("overhead") = "2GiB", py::arg("block_size") = 16, py::arg("kv_dtype") = py::none(),
      py::arg("context_len") = py::none(), py::arg("swap_space") = 0,
      "What `pagedkv plan` computes, as a dict: model is a preset name, a config.json path or a ModelShape; "
      "the budget is kv_memory (bytes or '40GiB') or a gpu preset (weights and overhead subtracted). "
      "Keys: bytes_per_token, bytes_per_block, num_blocks, token_capacity, blocks_per_request, "
      "max_concurrency, ...");
}

}  // namespace pagedkv::python
