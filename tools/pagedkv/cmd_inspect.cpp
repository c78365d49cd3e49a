// pagedkv inspect FILE.gguf: what a model file is (architecture, size, context, tensor types,
// tokenizer, chat template), what its KV cache costs (bytes per token, tokens in a budget, as
// `pagedkv plan` counts them), and whether pagedkv can run it — if not, exactly what is missing.
// Reads the header and metadata only (the file is memory-mapped; no weight is touched).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "pagedkv/core/dtype.h"
#include "pagedkv/core/error.h"
#include "pagedkv/memory/byte_size.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/format/tensor_type.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"

namespace pagedkv::cli {
namespace {

struct InspectOptions {
  std::string path;
  std::string kv_memory = "4GiB";
  std::string kv_dtype = "fp16";
  bool json = false;
  int context_length = 0;
};

std::string metadata_string(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return "";
  try {
    return std::string(v->as_string(key));
  } catch (const Error&) {
    return "";
  }
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

int run_inspect(const InspectOptions& o) {
  const GgufFile file(o.path);  // FormatError names what is wrong with a corrupt or truncated file
  const std::optional<DType> dtype = parse_dtype(o.kv_dtype);
  if (!dtype) throw ConfigError(fmt::format("unknown --kv-dtype '{}'", o.kv_dtype));
  const uint64_t budget = parse_byte_size(o.kv_memory);

  const std::string arch = metadata_string(file, "general.architecture");
  // Tensor types: counts and bytes; parameters are all tensors' elements.
  struct TypeUse {
    int tensors = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, TypeUse> types;
  uint64_t params = 0, weight_bytes = 0;
  for (const GgufTensor& t : file.tensors()) {
    TypeUse& u = types[tensor_type_name(t.type)];
    ++u.tensors;
    u.bytes += t.bytes;
    params += static_cast<uint64_t>(t.elements());
    weight_bytes += t.bytes;
  }

  // Whether pagedkv runs it: the model and its tokenizer load (the first error names the key,
  // tensor or type that is missing or unsupported).
  std::vector<std::string> missing;
  std::unique_ptr<GgufModel> model;
  try {
    model = std::make_unique<GgufModel>(o.path, o.context_length);
  } catch (const Error& e) {
    missing.push_back(e.what());
  }
  int vocab = 0;
  try {
    vocab = make_gguf_tokenizer(file)->vocab_size();
  } catch (const Error& e) {
    missing.push_back(e.what());
  }

  nlohmann::ordered_json j;
  j["file"] = o.path;
  j["architecture"] = arch;
  j["name"] = metadata_string(file, "general.name");
  j["parameters"] = params;
  j["weight_bytes"] = weight_bytes;
  j["context_length"] = file.get_int(arch + ".context_length", 0);
  j["tensor_types"] = nlohmann::ordered_json::object();
  for (const auto& [name, u] : types) j["tensor_types"][name] = {{"tensors", u.tensors}, {"bytes", u.bytes}};
  j["tokenizer"] = {{"model", metadata_string(file, "tokenizer.ggml.model")},
                    {"pre", metadata_string(file, "tokenizer.ggml.pre")},
                    {"vocab_size", vocab}};
  j["chat_template"] = file.find("tokenizer.chat_template") != nullptr;
  if (model) {
    const ModelConfig& c = model->config();
    const KVCacheSpec spec = c.kv_cache_spec(16, *dtype);
    const uint64_t per_token = spec.bytes_per_token_per_layer() * static_cast<uint64_t>(c.n_layers);
    j["layers"] = c.n_layers;
    j["heads"] = c.n_heads;
    j["kv_heads"] = c.n_kv_heads;
    j["head_dim"] = c.head_dim();
    j["embedding"] = c.dim;
    if (c.n_experts > 0) j["experts"] = {{"count", c.n_experts}, {"used_per_token", c.n_experts_used}};
    if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
    if (c.rope_original_context > 0)
      j["rope_scaling"] = {{"type", "longrope"},
                           {"original_context_length", c.rope_original_context},
                           {"context_length", c.seq_len},
                           {"factors", c.uses_long_rope_factors() ? "long" : "short"},
                           {"attn_factor", c.rope_attn_factor}};
    j["kv_cache"] = {{"dtype", std::string(dtype_name(*dtype))},
                     {"bytes_per_token", per_token},
                     {"budget_bytes", budget},
                     {"tokens_in_budget", per_token > 0 ? budget / per_token : 0}};
  }
  j["runnable"] = missing.empty();
  j["missing"] = missing;

  if (o.json) {
    fmt::print("{}\n", j.dump(2));
    return missing.empty() ? 0 : 3;
  }
  fmt::print("{}\n", o.path);
  fmt::print("  architecture    {}{}\n", arch,
             j["name"].get<std::string>().empty() ? "" : " (" + j["name"].get<std::string>() + ")");
  fmt::print("  parameters      {}, weights {}\n",
             params >= 1000000000 ? fmt::format("{:.2f} B", static_cast<double>(params) / 1e9)
                                  : fmt::format("{:.2f} M", static_cast<double>(params) / 1e6),
             human_bytes(static_cast<double>(weight_bytes)));
  fmt::print("  context length  {}\n", j["context_length"].get<int64_t>());
  if (model)
    fmt::print("  shape           {} layers, {} heads / {} KV heads of {}, embedding {}{}\n", j["layers"].get<int>(),
               j["heads"].get<int>(), j["kv_heads"].get<int>(), j["head_dim"].get<int>(), j["embedding"].get<int>(),
               j.contains("experts") ? fmt::format(", {} experts ({} per token)", j["experts"]["count"].get<int>(),
                                                   j["experts"]["used_per_token"].get<int>())
                                     : "");
  if (j.contains("rope_scaling"))
    fmt::print(
        "  rope scaling    LongRoPE from original context {}: {} factors at context {}, attention factor {:.4f}\n",
        j["rope_scaling"]["original_context_length"].get<int>(), j["rope_scaling"]["factors"].get<std::string>(),
        j["rope_scaling"]["context_length"].get<int>(), j["rope_scaling"]["attn_factor"].get<float>());
  fmt::print("  tensor types   ");
  for (const auto& [name, u] : types)
    fmt::print(" {} x{} ({})", name, u.tensors, human_bytes(static_cast<double>(u.bytes)));
  fmt::print("\n  tokenizer       {} (pre-tokenizer {}), {} tokens\n", j["tokenizer"]["model"].get<std::string>(),
             j["tokenizer"]["pre"].get<std::string>().empty() ? "-" : j["tokenizer"]["pre"].get<std::string>(), vocab);
  fmt::print("  chat template   {}\n",
             j["chat_template"].get<bool>() ? "yes (rendered with the file's own Jinja)" : "none");
  if (model)
    fmt::print("  KV cache        {} per token ({}), {} tokens in {}\n",
               human_bytes(static_cast<double>(j["kv_cache"]["bytes_per_token"].get<uint64_t>())), o.kv_dtype,
               j["kv_cache"]["tokens_in_budget"].get<uint64_t>(), o.kv_memory);
  if (missing.empty()) {
    fmt::print("  runs on pagedkv yes\n");
    return 0;
  }
  fmt::print("  runs on pagedkv NO:\n");
  for (const std::string& m : missing) fmt::print("    - {}\n", m);
  return 3;
}

const CommandRegistration kInspectCommand{Command{
    "inspect", "what a GGUF model file holds, what its KV cache costs, and whether pagedkv can run it",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<InspectOptions>();
      sub.add_option("file", o->path, "the GGUF model file")->required();
      sub.add_option("--kv-memory", o->kv_memory, "KV budget to count tokens in, e.g. 16GiB")->capture_default_str();
      sub.add_option("--kv-dtype", o->kv_dtype, "KV element type: fp32, fp16, bf16, int8, fp8")->capture_default_str();
      sub.add_option("--context-length", o->context_length,
                     "the context to load the model at (as generate's; decides LongRoPE's factor set); 0 = the file's")
          ->capture_default_str();
      sub.add_flag("--json", o->json, "print JSON");
      return [o] { return run_inspect(*o); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
