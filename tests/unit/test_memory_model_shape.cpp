// Model shapes: the presets' published numbers, and reading Hugging Face config.json files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "pagedkv/core/error.h"
#include "pagedkv/memory/model_shape.h"

namespace pagedkv {
namespace {

namespace fs = std::filesystem;

// A scratch directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("pagedkv_model_shape_") + test->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path write(const std::string& name, const std::string& text) const {
    fs::path file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Mixtral-8x7B's config.json as published (fields that do not matter here left out).
constexpr const char* kMixtralConfig = R"({
  "_name_or_path": "mistralai/Mixtral-8x7B-v0.1",
  "architectures": ["MixtralForCausalLM"],
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 32000
})";

std::string error_of(const std::string& json) {
  try {
    parse_hf_config(json, "cfg.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelPresets, ParameterCountsMatchTheArchitecture) {
  // Each preset's published parameter count equals the count its architecture implies.
  for (const ModelShape& m : model_presets()) {
    EXPECT_NO_THROW(m.validate()) << m.name;
    EXPECT_EQ(estimate_num_params(m), m.num_params) << m.name;
  }
  EXPECT_EQ(model_preset("llama-2-70b").num_params, 68'976'648'192u);
  EXPECT_EQ(model_preset("stories260k").num_params, 260'032u);  // models/README.md
}

TEST(ModelPresets, TheRequiredModelsArePresent) {
  for (const char* name : {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b",
                           "mixtral-8x7b", "qwen2.5-7b", "stories260k"})
    EXPECT_NO_THROW(model_preset(name)) << name;
  EXPECT_EQ(model_preset("LLaMA-2-70B").name, "llama-2-70b");  // case-insensitive
}

TEST(ModelPresets, UnknownNameListsThePresets) {
  try {
    model_preset("gpt-5");
    FAIL();
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("'gpt-5'"), std::string::npos) << message;
    EXPECT_NE(message.find("llama-2-70b"), std::string::npos) << message;
    EXPECT_NE(message.find("qwen2.5-7b"), std::string::npos) << message;
  }
}

TEST(HFConfig, Mixtral) {
  TempDir dir;
  ModelShape m = load_hf_config(dir.write("config.json", kMixtralConfig));
  EXPECT_EQ(m.name, "mistralai/Mixtral-8x7B-v0.1");
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.num_q_heads, 32);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);  // hidden_size / heads
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_FALSE(m.sliding_window.has_value());
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_EQ(m.num_params, model_preset("mixtral-8x7b").num_params);
  // A directory means its config.json.
  EXPECT_EQ(load_hf_config(dir.path()).num_params, m.num_params);
}

TEST(HFConfig, DefaultsAndOptionalFields) {
  // Llama-2-7B's config omits num_key_value_heads (= heads) and head_dim.
  ModelShape m = parse_hf_config(R"({"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
      "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096,
      "torch_dtype": "float16"})",
                                 "llama2.json");
  EXPECT_EQ(m.name, "llama2.json");
  EXPECT_EQ(m.num_kv_heads, 32);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.dtype, DType::kF16);
  EXPECT_EQ(m.num_params, 6'738'415'616u);
  // An explicit head_dim wins (Mistral-Nemo: 5120 hidden, 32 heads, head_dim 128).
  m = parse_hf_config(R"({"num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 128, "hidden_size": 5120, "intermediate_size": 14336, "vocab_size": 131072,
      "max_position_embeddings": 1024000, "dtype": "bfloat16"})",
                      "nemo.json");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_FALSE(m.tie_word_embeddings);
}

TEST(HFConfig, QwenBiasAndDisabledSlidingWindow) {
  ModelShape m = parse_hf_config(R"({"model_type": "qwen2", "num_hidden_layers": 28, "num_attention_heads": 28,
      "num_key_value_heads": 4, "hidden_size": 3584, "intermediate_size": 18944, "vocab_size": 152064,
      "max_position_embeddings": 131072, "sliding_window": 131072, "use_sliding_window": false,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16"})",
                                 "qwen.json");
  EXPECT_TRUE(m.attention_bias);
  EXPECT_FALSE(m.sliding_window.has_value());
  EXPECT_EQ(m.num_params, model_preset("qwen2.5-7b").num_params);
}

TEST(HFConfig, SlidingWindowAndTiedEmbeddings) {
  ModelShape m = parse_hf_config(R"({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
      "sliding_window": 4096, "torch_dtype": "bfloat16"})",
                                 "mistral.json");
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.kv_cache_spec(16, DType::kBF16).kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(m.num_params, model_preset("mistral-7b-v0.1").num_params);

  ModelShape tied = parse_hf_config(R"({"num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4,
      "hidden_size": 64, "intermediate_size": 172, "vocab_size": 512, "max_position_embeddings": 512,
      "tie_word_embeddings": true})",
                                    "stories.json");
  EXPECT_EQ(tied.num_params, 260'032u);
  EXPECT_FALSE(tied.dtype.has_value());

  // Interleaved full and windowed layers are planned as full attention.
  ModelShape mixed = parse_hf_config(R"({"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 64,
      "intermediate_size": 128, "vocab_size": 512, "max_position_embeddings": 8192, "sliding_window": 4096,
      "layer_types": ["sliding_attention", "full_attention"]})",
                                     "mixed.json");
  EXPECT_FALSE(mixed.sliding_window.has_value());
}

TEST(HFConfig, MissingAndBadFieldsNameTheFieldAndFile) {
  const std::string base = R"("num_attention_heads": 32, "hidden_size": 4096, "intermediate_size": 11008,
      "vocab_size": 32000, "max_position_embeddings": 4096)";
  std::string message = error_of("{" + base + "}");
  EXPECT_NE(message.find("cfg.json"), std::string::npos) << message;
  EXPECT_NE(message.find("'num_hidden_layers' is missing"), std::string::npos) << message;

  message = error_of(R"({"num_hidden_layers": "32", )" + base + "}");
  EXPECT_NE(message.find("'num_hidden_layers'"), std::string::npos) << message;
  EXPECT_NE(message.find("\"32\""), std::string::npos) << message;

  EXPECT_NE(error_of(R"({"num_hidden_layers": -1, )" + base + "}").find("'num_hidden_layers'"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_hidden_layers": 32.5, )" + base + "}").find("'num_hidden_layers'"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"num_hidden_layers": 32, "num_key_value_heads": 5, )" + base + "}").find("'num_key_value_heads'"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"num_hidden_layers": 32, "torch_dtype": "float64", )" + base + "}").find("'torch_dtype'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_hidden_layers": 32, "tie_word_embeddings": "yes", )" + base + "}")
                .find("'tie_word_embeddings'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_hidden_layers": 32, "num_attention_heads": 0, "hidden_size": 4096,
      "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096})")
                .find("'num_attention_heads'"),
            std::string::npos);
  // hidden_size not divisible by the heads and no head_dim.
  EXPECT_NE(error_of(R"({"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 64,
      "intermediate_size": 128, "vocab_size": 512, "max_position_embeddings": 512})")
                .find("'head_dim'"),
            std::string::npos);
}

TEST(HFConfig, MalformedFiles) {
  TempDir dir;
  auto load_error = [](const fs::path& path) -> std::string {
    try {
      load_hf_config(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  fs::path truncated = dir.write("truncated.json", std::string(kMixtralConfig).substr(0, 100));
  std::string message = load_error(truncated);
  EXPECT_NE(message.find("truncated.json"), std::string::npos) << message;
  EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;

  message = load_error(dir.write("array.json", "[1, 2, 3]"));
  EXPECT_NE(message.find("array.json"), std::string::npos) << message;
  EXPECT_NE(message.find("JSON object"), std::string::npos) << message;

  message = load_error(dir.write("empty.json", ""));
  EXPECT_NE(message.find("empty.json"), std::string::npos) << message;

  message = load_error(dir.path() / "absent.json");
  EXPECT_NE(message.find("absent.json"), std::string::npos) << message;
}

}  // namespace
}  // namespace pagedkv
