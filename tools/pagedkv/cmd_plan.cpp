// pagedkv plan: how a model's KV cache fits a memory budget or a GPU (docs/plan.md).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "pagedkv/core/dtype.h"
#include "pagedkv/core/error.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/memory/gpu_spec.h"
#include "pagedkv/memory/hybrid_model.h"
#include "pagedkv/memory/memory_plan.h"
#include "pagedkv/memory/model_shape.h"

namespace pagedkv::cli {
namespace {

// Keys in the order the text table prints them.
using Json = nlohmann::ordered_json;

struct PlanArgs {
  std::string model;
  std::string kv_memory;
  std::string gpu;
  double gpu_memory_utilization = kDefaultGpuMemoryUtilization;
  std::string weights_dtype;
  std::string overhead = "2GiB";
  int block_size = 16;
  std::string kv_dtype = "auto";
  int64_t context_len = 0;
  CLI::Option* context_len_option = nullptr;
  CLI::Option* chunk_option = nullptr;
  std::string swap_space;
  int64_t chunk_tokens = 1;
  bool json = false;
  bool list = false;
  // Options that only mean something with --gpu; counted to reject them without it.
  std::vector<CLI::Option*> gpu_only;
};

// A preset name, else a config.json (or a directory holding one).
ModelShape resolve_model(const std::string& name_or_path) {
  for (const ModelShape& preset : model_presets())
    if (preset.name == name_or_path) return preset;
  std::filesystem::path path(name_or_path);
  if (std::filesystem::exists(path) || path.extension() == ".json") return load_hf_config(path);
  return model_preset(name_or_path);  // case-insensitive match, or the error listing presets
}

DType parse_dtype_option(std::string_view option, const std::string& text) {
  if (auto dtype = parse_dtype(text)) return *dtype;
  throw ConfigError(fmt::format("{}: unknown dtype '{}' (fp32, fp16, bf16, fp8, int8, int4)", option, text));
}

// int8/fp8 KV: the bytes of bytes_per_token that are scales (4 per token, KV head and layer, for
// K and for V: an f32 scale, or for int8 keys an f16 scale and offset); 0 for the other formats.
uint64_t scale_bytes_per_token(const MemoryPlan& p) {
  if (!dtype_has_row_scale(p.spec.dtype)) return 0;
  return 2ull * kKVScaleBytes * static_cast<uint64_t>(p.model.num_kv_heads) * static_cast<uint64_t>(p.model.num_layers);
}

Json plan_to_json(const MemoryPlan& p) {
  Json gpu = nullptr;
  if (p.gpu) {
    gpu = {{"name", p.gpu->gpu.name},
           {"description", p.gpu->gpu.description},
           {"memory_bytes", p.gpu->gpu.memory_bytes},
           {"gpu_memory_utilization", p.gpu->gpu_memory_utilization},
           {"weights_dtype", dtype_name(p.gpu->weights_dtype)},
           {"weights_bytes", p.gpu->weights_bytes},
           {"overhead_bytes", p.gpu->overhead_bytes}};
  }
  return {{"model", p.model.name},
          {"num_layers", p.model.num_layers},
          {"num_q_heads", p.model.num_q_heads},
          {"num_kv_heads", p.model.num_kv_heads},
          {"head_dim", p.model.head_dim},
          {"num_params", p.model.num_params},
          {"max_position_embeddings", p.model.max_position_embeddings},
          {"sliding_window", p.model.sliding_window ? Json(*p.model.sliding_window) : nullptr},
          {"block_size", p.spec.block_size},
          {"kv_dtype", dtype_name(p.spec.dtype)},
          {"bytes_per_token", p.bytes_per_token},
          {"scale_bytes_per_token", scale_bytes_per_token(p)},
          {"bytes_per_block_per_layer", p.bytes_per_block_per_layer},
          {"bytes_per_block", p.bytes_per_block},
          {"kv_memory_bytes", p.kv_memory_bytes},
          {"gpu", gpu},
          {"num_blocks", p.num_blocks},
          {"token_capacity", p.token_capacity},
          {"context_len", p.context_len},
          {"blocks_per_request", p.blocks_per_request},
          {"max_concurrency", p.max_concurrency},
          {"swap_space_bytes", p.swap_space_bytes},
          {"num_cpu_blocks", p.num_cpu_blocks}};
}

// "5.24 MB = 5.00 MiB": references quote either, so show both.
std::string both_units(uint64_t bytes) {
  return fmt::format("{} = {}", format_byte_size(bytes), format_byte_size_iec(bytes));
}

void print_row(std::string_view label, std::string_view value, std::string_view note = {}) {
  fmt::print("  {:<27}{:>18}{}{}\n", label, value, note.empty() ? "" : "  ", note);
}

void print_plan(const MemoryPlan& p) {
  const ModelShape& m = p.model;
  fmt::print("KV-cache plan for {}: block size {}, KV dtype {}\n", m.name, p.spec.block_size, dtype_name(p.spec.dtype));
  print_row("layers", format_grouped(static_cast<uint64_t>(m.num_layers)),
            fmt::format("{} KV heads x head dim {} ({} query heads)", m.num_kv_heads, m.head_dim, m.num_q_heads));
  if (m.sliding_window) print_row("sliding window", format_grouped(static_cast<uint64_t>(*m.sliding_window)), "tokens");
  print_row("bytes per token", format_grouped(p.bytes_per_token), both_units(p.bytes_per_token));
  if (const uint64_t scales = scale_bytes_per_token(p))
    print_row("  of which scales", format_grouped(scales),
              p.spec.dtype == DType::kInt8 ? "4 per token, KV head and layer: K f16 scale + offset, V f32 scale"
                                           : "one f32 per token, KV head and layer, for K and V");
  print_row("bytes per block per layer", format_grouped(p.bytes_per_block_per_layer),
            both_units(p.bytes_per_block_per_layer));
  print_row("bytes per block", format_grouped(p.bytes_per_block), both_units(p.bytes_per_block));
  if (p.gpu) {
    const GpuBudget& g = *p.gpu;
    print_row("GPU memory", format_grouped(g.gpu.memory_bytes),
              fmt::format("{} ({}, {})", both_units(g.gpu.memory_bytes), g.gpu.name, g.gpu.description));
    print_row("  x gpu_memory_utilization", fmt::format("{:.2f}", g.gpu_memory_utilization));
    print_row("  - weights", format_grouped(g.weights_bytes),
              fmt::format("{} ({} parameters in {})", format_byte_size(g.weights_bytes), format_grouped(m.num_params),
                          dtype_name(g.weights_dtype)));
    print_row("  - overhead reserve", format_grouped(g.overhead_bytes), both_units(g.overhead_bytes));
  }
  print_row("KV cache budget", format_grouped(p.kv_memory_bytes), both_units(p.kv_memory_bytes));
  print_row("number of blocks", format_grouped(static_cast<uint64_t>(p.num_blocks)));
  print_row("token capacity", format_grouped(static_cast<uint64_t>(p.token_capacity)),
            "tokens in all requests together");
  print_row("max concurrency", fmt::format("{:.2f}x", p.max_concurrency),
            fmt::format("requests of {} tokens ({} blocks each)", format_grouped(static_cast<uint64_t>(p.context_len)),
                        format_grouped(static_cast<uint64_t>(p.blocks_per_request))));
  if (p.swap_space_bytes > 0)
    print_row("CPU swap blocks", format_grouped(static_cast<uint64_t>(p.num_cpu_blocks)),
              fmt::format("in {} of swap space", both_units(p.swap_space_bytes)));
  if (p.max_concurrency < 1.0)
    fmt::print(
        "note: one request of {} tokens needs {} blocks but only {} fit; vLLM would refuse to start "
        "at this context length (lower --context-len)\n",
        format_grouped(static_cast<uint64_t>(p.context_len)),
        format_grouped(static_cast<uint64_t>(p.blocks_per_request)),
        format_grouped(static_cast<uint64_t>(p.num_blocks)));
}

int list_presets(bool json) {
  if (json) {
    Json models = Json::array();
    for (const ModelShape& m : model_presets()) {
      models.push_back({{"name", m.name},
                        {"num_layers", m.num_layers},
                        {"num_q_heads", m.num_q_heads},
                        {"num_kv_heads", m.num_kv_heads},
                        {"head_dim", m.head_dim},
                        {"num_params", m.num_params},
                        {"max_position_embeddings", m.max_position_embeddings},
                        {"sliding_window", m.sliding_window ? Json(*m.sliding_window) : nullptr},
                        {"dtype", m.dtype ? Json(dtype_name(*m.dtype)) : nullptr}});
    }
    Json gpus = Json::array();
    for (const GpuSpec& g : gpu_presets())
      gpus.push_back({{"name", g.name}, {"description", g.description}, {"memory_bytes", g.memory_bytes}});
    fmt::print("{}\n", Json{{"models", models}, {"gpus", gpus}}.dump(2));
    return 0;
  }
  fmt::print("models:\n  {:<16}{:>7}{:>10}{:>9}{:>20}{:>10}{:>7}\n", "name", "layers", "q/kv", "head", "parameters",
             "context", "dtype");
  for (const ModelShape& m : model_presets()) {
    fmt::print("  {:<16}{:>7}{:>10}{:>9}{:>20}{:>10}{:>7}{}\n", m.name, m.num_layers,
               fmt::format("{}/{}", m.num_q_heads, m.num_kv_heads), m.head_dim, format_grouped(m.num_params),
               m.max_position_embeddings, m.dtype ? dtype_name(*m.dtype) : "?",
               m.sliding_window ? fmt::format("  (sliding window {})", *m.sliding_window) : "");
  }
  fmt::print("hybrid models (sliding-window and full-attention layers; --kv-memory, --context-len, --chunk):\n");
  for (const HybridModelShape& m : hybrid_model_presets())
    fmt::print("  {:<16}{:>7}{:>10}{:>9}  window {}, every {} layer full\n", m.name, m.num_layers,
               fmt::format("{}/{}", m.num_q_heads, m.num_kv_heads), m.head_dim, m.sliding_window,
               m.full_attention_period == 2 ? std::string("2nd") : fmt::format("{}th", m.full_attention_period));
  fmt::print("GPUs (memory as nvidia-smi reports it):\n");
  for (const GpuSpec& g : gpu_presets())
    fmt::print("  {:<16}{:>20} bytes  {:>9}  {}\n", g.name, format_grouped(g.memory_bytes),
               fmt::format("{} MiB", g.memory_bytes >> 20), g.description);
  return 0;
}

// Hybrid presets (sliding-window and full-attention layers): the KV-cache groups vLLM's
// grouping rule makes, and one request's KV bytes with them and with uniform allocation.
int run_hybrid_plan(const PlanArgs& a, const HybridModelShape& m) {
  if (!a.gpu.empty()) throw UsageError(fmt::format("{} is a hybrid preset: give --kv-memory, not --gpu", m.name));
  const DType kv_dtype = a.kv_dtype == "auto" ? m.dtype : parse_dtype_option("--kv-dtype", a.kv_dtype);
  const int64_t context =
      a.context_len_option->count() > 0 ? a.context_len : std::min<int64_t>(m.max_position_embeddings, 131072);
  const HybridKVPlan p = plan_hybrid_kv(m, a.block_size, kv_dtype, context, a.chunk_tokens);
  std::optional<uint64_t> budget;
  if (!a.kv_memory.empty()) budget = parse_byte_size(a.kv_memory);
  int64_t blocks_per_request = 0;
  for (int64_t b : p.group_blocks_per_request) blocks_per_request += b;
  const int64_t num_blocks = budget ? static_cast<int64_t>(*budget / p.bytes_per_block) : 0;
  uint64_t bytes_per_token = 0;
  for (uint64_t b : p.group_bytes_per_token) bytes_per_token += b;
  int sliding_layers = 0;
  for (int l = 0; l < m.num_layers; ++l) sliding_layers += m.is_sliding_layer(l) ? 1 : 0;
  if (a.json) {
    Json groups = Json::array();
    for (size_t i = 0; i < p.groups.size(); ++i) {
      const PlannedKVGroup& g = p.groups[i];
      groups.push_back(
          {{"kind", attention_kind_name(g.spec.kind)},
           {"sliding_window", g.spec.kind == AttentionKind::kSlidingWindow ? Json(g.spec.sliding_window) : nullptr},
           {"num_layers", g.num_layers},
           {"padded_layers", g.padded_layers},
           {"block_size", g.spec.block_size},
           {"page_padding_bytes", g.page_padding_bytes},
           {"bytes_per_token", p.group_bytes_per_token[i]},
           {"blocks_per_request", p.group_blocks_per_request[i]}});
    }
    Json j = {{"model", m.name},
              {"hybrid", true},
              {"num_layers", m.num_layers},
              {"num_sliding_layers", sliding_layers},
              {"num_kv_heads", m.num_kv_heads},
              {"head_dim", m.head_dim},
              {"sliding_window", m.sliding_window},
              {"block_size", a.block_size},
              {"kv_dtype", dtype_name(kv_dtype)},
              {"groups", groups},
              {"padding_layers", p.padding_layers},
              {"padding_waste", p.padding_waste},
              {"page_padding_waste", p.page_padding_waste},
              {"bytes_per_token", bytes_per_token},
              {"bytes_per_block", p.bytes_per_block},
              {"context_len", p.context_len},
              {"chunk_tokens", p.chunk_tokens},
              {"blocks_per_request", blocks_per_request},
              {"kv_bytes_per_request", p.kv_bytes_per_request},
              {"kv_bytes_per_request_uniform", p.kv_bytes_per_request_uniform}};
    if (budget) {
      j["kv_memory_bytes"] = *budget;
      j["num_blocks"] = num_blocks;
      j["max_concurrency"] = static_cast<double>(num_blocks) / static_cast<double>(blocks_per_request);
      j["max_concurrency_uniform"] = static_cast<double>(*budget) / static_cast<double>(p.kv_bytes_per_request_uniform);
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(
      "KV-cache plan for {} (hybrid: {} sliding-window layers, window {}, and {} full-attention layers): "
      "block size {}, KV dtype {}\n",
      m.name, sliding_layers, m.sliding_window, m.num_layers - sliding_layers, a.block_size, dtype_name(kv_dtype));
  fmt::print("  KV-cache groups (vLLM's uniform-page grouping: {} layers a group)\n", p.groups.front().padded_layers);
  for (size_t i = 0; i < p.groups.size(); ++i) {
    const PlannedKVGroup& g = p.groups[i];
    const std::string kind =
        g.spec.kind == AttentionKind::kSlidingWindow ? fmt::format("sliding {}", g.spec.sliding_window) : "full";
    fmt::print("    group {:<3}{:<14}{:>4} layers{:<14}{:>14} bytes/token{:>10} blocks/request\n", i, kind,
               g.num_layers,
               g.padded_layers > g.num_layers ? fmt::format(" (+{} padding)", g.padded_layers - g.num_layers) : "",
               format_grouped(p.group_bytes_per_token[i]),
               format_grouped(static_cast<uint64_t>(p.group_blocks_per_request[i])));
  }
  if (p.padding_layers > 0)
    fmt::print("  padding: {} layers, may waste at most {:.2f}% of their kind's KV memory\n", p.padding_layers,
               100.0 * p.padding_waste);
  // Groups whose bytes per token differ get block sizes scaled to one page; what does not
  // divide is padding (vLLM prints the same at start-up).
  if (const std::string pad = describe_page_padding(p.groups); !pad.empty()) fmt::print("  page padding: {}\n", pad);
  print_row("bytes per token", format_grouped(bytes_per_token), "all layers");
  print_row("bytes per block", format_grouped(p.bytes_per_block), both_units(p.bytes_per_block));
  fmt::print("  one request of {} tokens (prefill chunk {}):\n", format_grouped(static_cast<uint64_t>(context)),
             p.chunk_tokens);
  print_row("KV bytes, hybrid groups", format_grouped(p.kv_bytes_per_request), both_units(p.kv_bytes_per_request));
  print_row("KV bytes, uniform", format_grouped(p.kv_bytes_per_request_uniform),
            both_units(p.kv_bytes_per_request_uniform));
  print_row("hybrid / uniform", fmt::format("{:.3f}", static_cast<double>(p.kv_bytes_per_request) /
                                                          static_cast<double>(p.kv_bytes_per_request_uniform)));
  if (budget) {
    print_row("KV cache budget", format_grouped(*budget), both_units(*budget));
    print_row("number of blocks", format_grouped(static_cast<uint64_t>(num_blocks)));
    print_row("max concurrency",
              fmt::format("{:.2f}x", static_cast<double>(num_blocks) / static_cast<double>(blocks_per_request)),
              fmt::format("uniform: {:.2f}x",
                          static_cast<double>(*budget) / static_cast<double>(p.kv_bytes_per_request_uniform)));
  }
  return 0;
}

int run_plan(const PlanArgs& a) {
  if (a.list) return list_presets(a.json);
  if (a.model.empty()) throw UsageError("--model is required (a preset name or a config.json path; see --list)");
  if (const HybridModelShape* hybrid = find_hybrid_model_preset(a.model)) return run_hybrid_plan(a, *hybrid);
  if (a.chunk_option->count() > 0) throw UsageError("--chunk only applies to hybrid presets (see --list)");

  PlanOptions options;
  options.block_size = a.block_size;
  if (a.kv_dtype != "auto") options.kv_dtype = parse_dtype_option("--kv-dtype", a.kv_dtype);
  if (!a.kv_memory.empty() && !a.gpu.empty()) throw UsageError("give either --kv-memory or --gpu, not both");
  if (!a.kv_memory.empty()) options.kv_memory_bytes = parse_byte_size(a.kv_memory);
  if (!a.gpu.empty()) {
    options.gpu = gpu_preset(a.gpu);
    options.gpu_memory_utilization = a.gpu_memory_utilization;
    if (!a.weights_dtype.empty()) options.weights_dtype = parse_dtype_option("--weights-dtype", a.weights_dtype);
    options.overhead_bytes = parse_byte_size(a.overhead);
  } else {
    for (const CLI::Option* opt : a.gpu_only)
      if (opt->count() > 0) throw UsageError(fmt::format("{} only applies with --gpu", opt->get_name()));
  }
  if (!options.kv_memory_bytes && !options.gpu) throw UsageError("give --kv-memory SIZE or --gpu NAME (see --list)");
  if (!a.swap_space.empty()) options.swap_space_bytes = parse_byte_size(a.swap_space);
  if (a.context_len_option->count() > 0) options.context_len = a.context_len;

  MemoryPlan plan = plan_memory(resolve_model(a.model), options);
  if (a.json) {
    fmt::print("{}\n", plan_to_json(plan).dump(2));
  } else {
    print_plan(plan);
  }
  return 0;
}

const CommandRegistration kPlan{Command{
    .name = "plan",
    .description = "how many KV-cache blocks a model gets from a memory budget or a GPU",
    .setup = [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<PlanArgs>();
      sub.add_option("--model", args->model, "model preset (see --list) or path of a Hugging Face config.json");
      sub.add_option("--kv-memory", args->kv_memory, "KV-cache budget: 43GB = 43e9 bytes, 40GiB = 40 x 2^30");
      sub.add_option("--gpu", args->gpu, "GPU preset the budget is derived from (see --list)");
      args->gpu_only.push_back(sub.add_option("--gpu-memory-utilization", args->gpu_memory_utilization,
                                              "share of GPU memory the engine may use (with --gpu)")
                                   ->capture_default_str());
      args->gpu_only.push_back(sub.add_option("--weights-dtype", args->weights_dtype,
                                              "dtype of the weights (with --gpu): fp16, bf16, fp8, int8, int4; "
                                              "default: the model's"));
      args->gpu_only.push_back(sub.add_option("--overhead", args->overhead,
                                              "reserve for activations, CUDA context and workspaces (with --gpu)")
                                   ->capture_default_str());
      sub.add_option("--block-size", args->block_size, "tokens per block")->capture_default_str();
      sub.add_option("--kv-dtype", args->kv_dtype, "KV-cache dtype; auto = the model's dtype")->capture_default_str();
      args->context_len_option =
          sub.add_option("--context-len", args->context_len,
                         "tokens per request for max concurrency (default: max_position_embeddings, at most 131072)");
      args->chunk_option =
          sub.add_option("--chunk", args->chunk_tokens,
                         "hybrid presets: prefill chunk in tokens (a sliding group holds its window plus "
                         "the chunk); 1 = decode")
              ->capture_default_str();
      sub.add_option("--swap-space", args->swap_space, "CPU swap space for swapped-out blocks, e.g. 4GiB");
      sub.add_flag("--json", args->json, "print the plan as JSON");
      sub.add_flag("--list", args->list, "list the model and GPU presets");
      return [args] { return run_plan(*args); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
