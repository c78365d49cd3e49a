#include "pagedkv/memory/model_shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Architecture numbers from each model's published config.json; parameter counts are the
// exact totals of its checkpoint (they equal estimate_num_params, which a test checks).
std::vector<ModelShape> make_model_shape_presets() {
  std::vector<ModelShape> p;
  p.push_back({.name = "stories260k",
               .num_layers = 5,
               .num_q_heads = 8,
               .num_kv_heads = 4,
               .head_dim = 8,
               .hidden_size = 64,
               .intermediate_size = 172,
               .num_experts = 1,
               .vocab_size = 512,
               .tie_word_embeddings = true,
               .attention_bias = false,
               .num_params = 260'032,
               .max_position_embeddings = 512,
               .sliding_window = {},
               .dtype = DType::kF32});
  p.push_back({.name = "llama-2-7b",
               .num_layers = 32,
               .num_q_heads = 32,
               .num_kv_heads = 32,
               .head_dim = 128,
               .hidden_size = 4096,
               .intermediate_size = 11008,
               .num_experts = 1,
               .vocab_size = 32000,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 6'738'415'616,
               .max_position_embeddings = 4096,
               .sliding_window = {},
               .dtype = DType::kF16});
  p.push_back({.name = "llama-2-13b",
               .num_layers = 40,
               .num_q_heads = 40,
               .num_kv_heads = 40,
               .head_dim = 128,
               .hidden_size = 5120,
               .intermediate_size = 13824,
               .num_experts = 1,
               .vocab_size = 32000,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 13'015'864'320,
               .max_position_embeddings = 4096,
               .sliding_window = {},
               .dtype = DType::kF16});
  p.push_back({.name = "llama-2-70b",
               .num_layers = 80,
               .num_q_heads = 64,
               .num_kv_heads = 8,
               .head_dim = 128,
               .hidden_size = 8192,
               .intermediate_size = 28672,
               .num_experts = 1,
               .vocab_size = 32000,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 68'976'648'192,
               .max_position_embeddings = 4096,
               .sliding_window = {},
               .dtype = DType::kF16});
  p.push_back({.name = "llama-3-8b",
               .num_layers = 32,
               .num_q_heads = 32,
               .num_kv_heads = 8,
               .head_dim = 128,
               .hidden_size = 4096,
               .intermediate_size = 14336,
               .num_experts = 1,
               .vocab_size = 128256,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 8'030'261'248,
               .max_position_embeddings = 8192,
               .sliding_window = {},
               .dtype = DType::kBF16});
  p.push_back({.name = "llama-3-70b",
               .num_layers = 80,
               .num_q_heads = 64,
               .num_kv_heads = 8,
               .head_dim = 128,
               .hidden_size = 8192,
               .intermediate_size = 28672,
               .num_experts = 1,
               .vocab_size = 128256,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 70'553'706'496,
               .max_position_embeddings = 8192,
               .sliding_window = {},
               .dtype = DType::kBF16});
  p.push_back({.name = "llama-3.1-405b",
               .num_layers = 126,
               .num_q_heads = 128,
               .num_kv_heads = 8,
               .head_dim = 128,
               .hidden_size = 16384,
               .intermediate_size = 53248,
               .num_experts = 1,
               .vocab_size = 128256,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 405'853'388'800,
               .max_position_embeddings = 131072,
               .sliding_window = {},
               .dtype = DType::kBF16});
  p.push_back({.name = "mistral-7b-v0.1",
               .num_layers = 32,
               .num_q_heads = 32,
               .num_kv_heads = 8,
               .head_dim = 128,
               .hidden_size = 4096,
               .intermediate_size = 14336,
               .num_experts = 1,
               .vocab_size = 32000,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 7'241'732'096,
               .max_position_embeddings = 32768,
               .sliding_window = 4096,
               .dtype = DType::kBF16});
  p.push_back({.name = "mixtral-8x7b",
               .num_layers = 32,
               .num_q_heads = 32,
               .num_kv_heads = 8,
               .head_dim = 128,
               .hidden_size = 4096,
               .intermediate_size = 14336,
               .num_experts = 8,
               .vocab_size = 32000,
               .tie_word_embeddings = false,
               .attention_bias = false,
               .num_params = 46'702'792'704,
               .max_position_embeddings = 32768,
               .sliding_window = {},
               .dtype = DType::kBF16});
  p.push_back({.name = "qwen2.5-7b",
               .num_layers = 28,
               .num_q_heads = 28,
               .num_kv_heads = 4,
               .head_dim = 128,
               .hidden_size = 3584,
               .intermediate_size = 18944,
               .num_experts = 1,
               .vocab_size = 152064,
               .tie_word_embeddings = false,
               .attention_bias = true,
               .num_params = 7'615'616'512,
               .max_position_embeddings = 131072,
               .sliding_window = {},
               .dtype = DType::kBF16});
  return p;
}

// ---- config.json fields --------------------------------------------------------------------

[[noreturn]] void bad_field(std::string_view source, std::string_view field, std::string_view why) {
  throw ConfigError(fmt::format("{}: field '{}' {}", source, field, why));
}

const nlohmann::json* find_field(const nlohmann::json& config, std::string_view field) {
  auto it = config.find(field);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

int positive_int(const nlohmann::json& value, std::string_view source, std::string_view field) {
  if (!value.is_number_integer())
    bad_field(source, field, fmt::format("must be a positive integer, got {}", value.dump()));
  int64_t v = value.get<int64_t>();
  if (v <= 0 || v > std::numeric_limits<int>::max())
    bad_field(source, field, fmt::format("must be a positive integer, got {}", v));
  return static_cast<int>(v);
}

int required_int(const nlohmann::json& config, std::string_view source, std::string_view field) {
  const nlohmann::json* value = find_field(config, field);
  if (value == nullptr) bad_field(source, field, "is missing");
  return positive_int(*value, source, field);
}

std::optional<int> optional_int(const nlohmann::json& config, std::string_view source, std::string_view field) {
  const nlohmann::json* value = find_field(config, field);
  if (value == nullptr) return std::nullopt;
  return positive_int(*value, source, field);
}

std::optional<bool> optional_bool(const nlohmann::json& config, std::string_view source, std::string_view field) {
  const nlohmann::json* value = find_field(config, field);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) bad_field(source, field, fmt::format("must be true or false, got {}", value->dump()));
  return value->get<bool>();
}

std::string optional_string(const nlohmann::json& config, std::string_view source, std::string_view field) {
  const nlohmann::json* value = find_field(config, field);
  if (value == nullptr) return {};
  if (!value->is_string()) bad_field(source, field, fmt::format("must be a string, got {}", value->dump()));
  return value->get<std::string>();
}

// Models that interleave windowed and full-attention layers (Gemma 2/3, configs with
// `layer_types`) are planned as full attention: per-request block counts are then an upper
// bound, so the concurrency reported is a lower bound rather than an overstatement.
bool mixes_full_and_windowed_layers(const nlohmann::json& config, std::string_view model_type) {
  if (model_type.starts_with("gemma2") || model_type.starts_with("gemma3")) return true;
  const nlohmann::json* layer_types = find_field(config, "layer_types");
  if (layer_types == nullptr || !layer_types->is_array()) return false;
  return std::any_of(layer_types->begin(), layer_types->end(),
                     [](const nlohmann::json& t) { return t.is_string() && t.get<std::string>() == "full_attention"; });
}

}  // namespace

KVCacheSpec ModelShape::kv_cache_spec(int block_size, DType kv_dtype) const {
  KVCacheSpec spec;
  spec.kind = sliding_window ? AttentionKind::kSlidingWindow : AttentionKind::kFull;
  spec.block_size = block_size;
  spec.num_kv_heads = num_kv_heads;
  spec.head_dim = head_dim;
  spec.dtype = kv_dtype;
  spec.sliding_window = sliding_window.value_or(0);
  spec.validate();
  return spec;
}

void ModelShape::validate() const {
  auto require_positive = [this](std::string_view field, int64_t value) {
    if (value <= 0) throw ConfigError(fmt::format("model '{}': {} must be positive, got {}", name, field, value));
  };
  require_positive("num_layers", num_layers);
  require_positive("num_q_heads", num_q_heads);
  require_positive("num_kv_heads", num_kv_heads);
  require_positive("head_dim", head_dim);
  require_positive("hidden_size", hidden_size);
  require_positive("intermediate_size", intermediate_size);
  require_positive("num_experts", num_experts);
  require_positive("vocab_size", vocab_size);
  require_positive("max_position_embeddings", max_position_embeddings);
  if (sliding_window) require_positive("sliding_window", *sliding_window);
  if (num_q_heads % num_kv_heads != 0)
    throw ConfigError(fmt::format("model '{}': num_q_heads ({}) must be a multiple of num_kv_heads ({})", name,
                                  num_q_heads, num_kv_heads));
}

uint64_t estimate_num_params(const ModelShape& m) {
  const uint64_t hidden = static_cast<uint64_t>(m.hidden_size);
  const uint64_t q_width = static_cast<uint64_t>(m.num_q_heads) * static_cast<uint64_t>(m.head_dim);
  const uint64_t kv_width = static_cast<uint64_t>(m.num_kv_heads) * static_cast<uint64_t>(m.head_dim);
  const uint64_t experts = static_cast<uint64_t>(m.num_experts);

  const uint64_t attention =
      hidden * q_width + 2 * hidden * kv_width + q_width * hidden + (m.attention_bias ? q_width + 2 * kv_width : 0);
  const uint64_t mlp = experts * 3 * hidden * static_cast<uint64_t>(m.intermediate_size) +
                       (experts > 1 ? hidden * experts : 0);  // the router
  const uint64_t norms = 2 * hidden;
  const uint64_t layer = attention + mlp + norms;

  const uint64_t embedding = static_cast<uint64_t>(m.vocab_size) * hidden;
  const uint64_t lm_head = m.tie_word_embeddings ? 0 : embedding;
  return embedding + static_cast<uint64_t>(m.num_layers) * layer + hidden /* final norm */ + lm_head;
}

std::span<const ModelShape> model_presets() {
  static const std::vector<ModelShape> presets = make_model_shape_presets();
  return presets;
}

const ModelShape& model_preset(std::string_view name) {
  std::vector<std::string_view> names;
  for (const ModelShape& m : model_presets()) {
    if (equals_ignoring_case(m.name, name)) return m;
    names.push_back(m.name);
  }
  throw ConfigError(fmt::format("unknown model '{}'; presets: {} (or give the path of a Hugging Face config.json)",
                                name, fmt::join(names, ", ")));
}

ModelShape parse_hf_config(std::string_view json_text, std::string_view source) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!config.is_object())
    throw ConfigError(fmt::format("{}: expected a JSON object, got {}", source, config.type_name()));

  ModelShape m;
  m.name = optional_string(config, source, "_name_or_path");
  if (m.name.empty()) m.name = std::string(source);
  m.num_layers = required_int(config, source, "num_hidden_layers");
  m.num_q_heads = required_int(config, source, "num_attention_heads");
  m.hidden_size = required_int(config, source, "hidden_size");
  m.vocab_size = required_int(config, source, "vocab_size");
  m.intermediate_size = required_int(config, source, "intermediate_size");
  m.max_position_embeddings = required_int(config, source, "max_position_embeddings");
  m.num_kv_heads = optional_int(config, source, "num_key_value_heads").value_or(m.num_q_heads);
  if (auto head_dim = optional_int(config, source, "head_dim")) {
    m.head_dim = *head_dim;
  } else {
    if (m.hidden_size % m.num_q_heads != 0)
      bad_field(source, "head_dim",
                fmt::format("is missing and hidden_size ({}) is not a multiple of "
                            "num_attention_heads ({})",
                            m.hidden_size, m.num_q_heads));
    m.head_dim = m.hidden_size / m.num_q_heads;
  }
  if (m.num_q_heads % m.num_kv_heads != 0)
    bad_field(source, "num_key_value_heads",
              fmt::format("({}) must divide num_attention_heads ({})", m.num_kv_heads, m.num_q_heads));
  m.num_experts = optional_int(config, source, "num_local_experts").value_or(1);
  m.tie_word_embeddings = optional_bool(config, source, "tie_word_embeddings").value_or(false);

  const std::string model_type = optional_string(config, source, "model_type");
  // Qwen2 always has q/k/v biases but its config does not say so.
  m.attention_bias = optional_bool(config, source, "attention_bias").value_or(model_type == "qwen2");

  // Qwen2 configs carry a sliding_window that is off unless use_sliding_window is true.
  std::optional<int> window = optional_int(config, source, "sliding_window");
  if (optional_bool(config, source, "use_sliding_window") == false) window.reset();
  if (mixes_full_and_windowed_layers(config, model_type)) window.reset();
  m.sliding_window = window;

  // transformers >= 4.56 writes "dtype"; earlier versions "torch_dtype".
  for (std::string_view field : {"torch_dtype", "dtype"}) {
    std::string text = optional_string(config, source, field);
    if (text.empty()) continue;
    m.dtype = parse_dtype(text);
    if (!m.dtype) bad_field(source, field, fmt::format("has unknown dtype \"{}\"", text));
    break;
  }

  m.num_params = estimate_num_params(m);
  m.validate();
  return m;
}

ModelShape load_hf_config(const std::filesystem::path& path) {
  std::filesystem::path file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("cannot read model config '{}'", file.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hf_config(text.str(), file.string());
}

}  // namespace pagedkv
