// End to end: `pagedkv inspect` on the shared GGUF files (ctest sets PAGEDKV_BIN): what the file
// holds, its KV cost, and — for a file pagedkv cannot run — exactly what is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "cli_test_support.h"
#include "pagedkv/model/format/gguf_writer.h"

namespace {

namespace fs = std::filesystem;

class InspectCli : public pagedkv::testing::CliTest {
 protected:
  fs::path gguf(const std::string& name) const {
    const char* env = std::getenv("PAGEDKV_SHARED_DIR");
    return fs::path(env ? env : "../shared") / "models/gguf" / name;
  }
};

TEST_F(InspectCli, AMixtureOfExpertsKQuantMix) {
  const fs::path file = gguf("small-qwen3moe.q4_k_m.gguf");
  if (!fs::exists(file)) GTEST_SKIP() << file << " is absent";
  const auto r = pagedkv("inspect " + file.string() + " --json --kv-memory 1MiB --kv-dtype fp16", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["architecture"], "qwen3moe");
  EXPECT_TRUE(j["runnable"].get<bool>());
  EXPECT_TRUE(j["missing"].empty());
  EXPECT_EQ(j["experts"]["count"], 8);
  EXPECT_EQ(j["experts"]["used_per_token"], 2);
  EXPECT_TRUE(j["tensor_types"].contains("Q4_K"));
  EXPECT_TRUE(j["tensor_types"].contains("Q6_K"));
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 512);
  // K and V, fp16, of 2 KV heads x 32 dims in 2 layers: 2 x 2 x 32 x 2 B x 2 layers = 512 B a token.
  EXPECT_EQ(j["kv_cache"]["bytes_per_token"], 512);
  EXPECT_EQ(j["kv_cache"]["tokens_in_budget"], 2048);
  uint64_t sum = 0;
  for (const auto& [type, use] : j["tensor_types"].items()) sum += use["bytes"].get<uint64_t>();
  EXPECT_EQ(sum, j["weight_bytes"].get<uint64_t>());

  const auto text = pagedkv("inspect " + file.string(), false);
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("runs on pagedkv yes"), std::string::npos) << text.output;
}

TEST_F(InspectCli, AFileItCannotRunSaysWhatIsMissing) {
  const fs::path path = fs::temp_directory_path() / ("pagedkv-inspect-" + std::to_string(::getpid()) + ".gguf");
  pagedkv::GgufWriter w;
  w.add_string("general.architecture", "mamba");
  w.add_u32("mamba.context_length", 4096);
  w.write(path.string());
  const auto r = pagedkv("inspect " + path.string() + " --json", false);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_FALSE(j["runnable"].get<bool>());
  ASSERT_FALSE(j["missing"].empty());
  EXPECT_NE(j["missing"][0].get<std::string>().find("mamba"), std::string::npos) << j["missing"].dump();
  EXPECT_EQ(j["context_length"], 4096);
  const auto text = pagedkv("inspect " + path.string(), true);
  EXPECT_NE(text.output.find("runs on pagedkv NO"), std::string::npos) << text.output;
  fs::remove(path);

  const auto absent = pagedkv("inspect /nonexistent.gguf", true);
  EXPECT_NE(absent.exit_code, 0);
  EXPECT_NE(absent.output.find("/nonexistent.gguf"), std::string::npos) << absent.output;
}

TEST_F(InspectCli, ReportsLongRopeAndTheSetItsContextChooses) {
  // A one-layer phi3 with LongRoPE factors (and no tokenizer: loadable, not runnable).
  const fs::path path =
      fs::temp_directory_path() / ("pagedkv-inspect-longrope-" + std::to_string(::getpid()) + ".gguf");
  pagedkv::GgufWriter w;
  w.add_string("general.architecture", "phi3");
  w.add_u32("phi3.context_length", 1024);
  w.add_u32("phi3.rope.scaling.original_context_length", 256);
  w.add_f32("phi3.rope.scaling.attn_factor", 1.25f);
  w.add_u32("phi3.embedding_length", 64);
  w.add_u32("phi3.block_count", 1);
  w.add_u32("phi3.feed_forward_length", 32);
  w.add_u32("phi3.attention.head_count", 4);
  w.add_u32("phi3.attention.head_count_kv", 2);
  const std::vector<float> ones(64 * 128, 1.0f);
  auto add = [&](const std::string& name, std::vector<int64_t> ne) {
    size_t n = 1;
    for (int64_t d : ne) n *= static_cast<size_t>(d);
    w.add_tensor_f32(name, pagedkv::TensorType::kF32, std::move(ne), std::span(ones).first(n));
  };
  add("token_embd.weight", {64, 16});
  add("output_norm.weight", {64});
  add("rope_factors_long.weight", {8});
  add("rope_factors_short.weight", {8});
  add("blk.0.attn_norm.weight", {64});
  add("blk.0.attn_qkv.weight", {64, 128});
  add("blk.0.attn_output.weight", {64, 64});
  add("blk.0.ffn_norm.weight", {64});
  add("blk.0.ffn_up.weight", {64, 64});
  add("blk.0.ffn_down.weight", {32, 64});
  w.write(path.string());
  for (const auto& [flag, factors, context] :
       {std::tuple{"", "long", 1024}, std::tuple{" --context-length 257", "long", 257},
        std::tuple{" --context-length 256", "short", 256}}) {
    const auto r = pagedkv("inspect " + path.string() + " --json" + flag, false);
    const nlohmann::json j = nlohmann::json::parse(r.output);
    ASSERT_TRUE(j.contains("rope_scaling")) << r.output;
    EXPECT_EQ(j["rope_scaling"]["type"], "longrope");
    EXPECT_EQ(j["rope_scaling"]["original_context_length"], 256);
    EXPECT_EQ(j["rope_scaling"]["context_length"], context);
    EXPECT_EQ(j["rope_scaling"]["factors"], factors) << flag;
    EXPECT_FLOAT_EQ(j["rope_scaling"]["attn_factor"].get<float>(), 1.25f);
  }
  const auto text = pagedkv("inspect " + path.string() + " --context-length 256", false);
  EXPECT_NE(
      text.output.find("LongRoPE from original context 256: short factors at context 256, attention factor 1.2500"),
      std::string::npos)
      << text.output;
  fs::remove(path);
}

}  // namespace
