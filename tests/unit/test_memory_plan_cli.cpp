// End to end: runs the built `pagedkv plan` (ctest sets PAGEDKV_BIN) and checks its output.
// Not in tests/asan_tests.txt: the sanitizer stage builds the tests listed there, not the tool.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace {

using pagedkv::testing::CliResult;

class PlanCli : public pagedkv::testing::CliTest {
 protected:
  CliResult run(const std::string& args, bool with_stderr = false) const { return pagedkv(args, with_stderr); }

  nlohmann::json run_json(const std::string& args) const {
    CliResult r = run(args + " --json");
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    return nlohmann::json::parse(r.output);
  }
};

TEST_F(PlanCli, Llama2_70BOnA43GBBudget) {
  nlohmann::json plan =
      run_json("plan --model llama-2-70b --kv-memory 43GB --block-size 16 --kv-dtype fp16 --context-len 4096");
  EXPECT_EQ(plan["model"], "llama-2-70b");
  EXPECT_EQ(plan["kv_dtype"], "fp16");
  EXPECT_EQ(plan["block_size"], 16);
  EXPECT_EQ(plan["bytes_per_token"], 327'680);
  EXPECT_EQ(plan["bytes_per_block_per_layer"], 65'536);
  EXPECT_EQ(plan["bytes_per_block"], 5'242'880);
  EXPECT_EQ(plan["kv_memory_bytes"], 43'000'000'000);
  EXPECT_EQ(plan["num_blocks"], 8'201);
  EXPECT_EQ(plan["token_capacity"], 131'216);
  EXPECT_EQ(plan["context_len"], 4096);
  EXPECT_EQ(plan["blocks_per_request"], 256);
  EXPECT_DOUBLE_EQ(plan["max_concurrency"].get<double>(), 8201.0 / 256.0);
  EXPECT_TRUE(plan["gpu"].is_null());
  EXPECT_EQ(plan["num_cpu_blocks"], 0);
}

TEST_F(PlanCli, GpuPresetWithInt4Weights) {
  nlohmann::json plan = run_json("plan --model llama-2-70b --gpu h100-80gb --weights-dtype int4 --swap-space 4GiB");
  ASSERT_TRUE(plan["gpu"].is_object());
  EXPECT_EQ(plan["gpu"]["name"], "h100-80gb");
  EXPECT_EQ(plan["gpu"]["memory_bytes"], 81'559ll << 20);
  EXPECT_EQ(plan["gpu"]["weights_dtype"], "int4");
  EXPECT_EQ(plan["gpu"]["weights_bytes"], 34'488'324'096);
  EXPECT_EQ(plan["kv_memory_bytes"], 40'332'921'241);
  EXPECT_EQ(plan["num_blocks"], 7'692);
  EXPECT_EQ(plan["num_cpu_blocks"], 819);
}

TEST_F(PlanCli, TheOtherReferenceModels) {
  EXPECT_EQ(run_json("plan --model llama-2-7b --kv-memory 1GB --kv-dtype fp16")["bytes_per_block"], 8'388'608);
  EXPECT_EQ(run_json("plan --model llama-2-13b --kv-memory 1GB --kv-dtype fp16")["bytes_per_block"], 13'107'200);
  EXPECT_EQ(run_json("plan --model mixtral-8x7b --kv-memory 1GB --kv-dtype fp16")["bytes_per_block"], 2'097'152);
  EXPECT_EQ(run_json("plan --model llama-3.1-405b --kv-memory 1GB --kv-dtype fp16")["bytes_per_block"], 8'257'536);
  EXPECT_EQ(run_json("plan --model llama-3-8b --kv-memory 1GB")["bytes_per_token"], 131'072);
}

TEST_F(PlanCli, HuggingFaceConfigPath) {
  std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("pagedkv_plan_cli_" + std::to_string(::getpid()) + "_config.json");
  std::ofstream(file) << R"({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
      "torch_dtype": "bfloat16"})";
  nlohmann::json plan = run_json("plan --model '" + file.string() + "' --kv-memory 40GiB");
  std::filesystem::remove(file);
  EXPECT_EQ(plan["kv_dtype"], "bf16");
  EXPECT_EQ(plan["bytes_per_token"], 131'072);
  EXPECT_EQ(plan["num_params"], 8'030'261'248);
  EXPECT_EQ(plan["num_blocks"], (40ll << 30) / (131'072 * 16));
}

TEST_F(PlanCli, TextTable) {
  CliResult r = run("plan --model llama-2-70b --kv-memory 43GB --block-size 16 --kv-dtype fp16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected : {"65,536", "5,242,880", "8,201", "131,216", "32.04x", "4,096 tokens"})
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " missing from\n" << r.output;
}

TEST_F(PlanCli, ListsPresets) {
  nlohmann::json list = run_json("plan --list");
  std::string models = list["models"].dump();
  std::string gpus = list["gpus"].dump();
  for (const char* name : {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b",
                           "mixtral-8x7b", "qwen2.5-7b", "stories260k"})
    EXPECT_NE(models.find(name), std::string::npos) << name;
  for (const char* name : {"h100-80gb", "h200-141gb", "a100-40gb", "a100-80gb", "l4-24gb"})
    EXPECT_NE(gpus.find(name), std::string::npos) << name;
}

TEST_F(PlanCli, ErrorsAreClear) {
  CliResult unknown = run("plan --model gpt-5 --kv-memory 43GB", true);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("llama-2-70b"), std::string::npos) << unknown.output;

  CliResult gpu = run("plan --model llama-2-70b --gpu v100", true);
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_NE(gpu.output.find("h100-80gb"), std::string::npos) << gpu.output;

  CliResult too_big = run("plan --model llama-3.1-405b --gpu h100-80gb", true);
  EXPECT_EQ(too_big.exit_code, 2);
  EXPECT_NE(too_big.output.find("does not fit"), std::string::npos) << too_big.output;

  CliResult bad_size = run("plan --model llama-2-70b --kv-memory 43XB", true);
  EXPECT_EQ(bad_size.exit_code, 2);
  EXPECT_NE(bad_size.output.find("'43XB'"), std::string::npos) << bad_size.output;

  EXPECT_EQ(run("plan --model llama-2-70b", true).exit_code, 2);  // no budget
  EXPECT_EQ(run("plan --model llama-2-70b --kv-memory 43GB --gpu h100-80gb", true).exit_code, 2);
  EXPECT_EQ(run("plan --model llama-2-70b --kv-memory 43GB --weights-dtype int4", true).exit_code, 2);
}

}  // namespace

namespace {

// Hybrid presets (docs/hybrid.md): per-group bytes and one request's KV bytes, hybrid and uniform.
TEST_F(PlanCli, HybridPresetGemma3At32K) {
  nlohmann::json plan = run_json("plan --model gemma-3-27b --context-len 32768");
  EXPECT_EQ(plan["hybrid"], true);
  EXPECT_EQ(plan["num_sliding_layers"], 52);
  ASSERT_EQ(plan["groups"].size(), 7u);
  EXPECT_EQ(plan["groups"][0]["kind"], "sliding_window");
  EXPECT_EQ(plan["groups"][0]["bytes_per_token"], 81'920);
  EXPECT_EQ(plan["groups"][5]["num_layers"], 2);
  EXPECT_EQ(plan["groups"][6]["kind"], "full");
  EXPECT_EQ(plan["padding_layers"], 8);
  EXPECT_EQ(plan["kv_bytes_per_request"], 3'195'535'360ull);
  EXPECT_EQ(plan["kv_bytes_per_request_uniform"], 16'642'998'272ull);
  nlohmann::json chunked = run_json("plan --model gemma-3-27b --context-len 32768 --chunk 2048");
  EXPECT_EQ(chunked["kv_bytes_per_request"], 4'202'168'320ull);
}

TEST_F(PlanCli, HybridPresetGptOssWithABudget) {
  nlohmann::json plan = run_json("plan --model gpt-oss-120b --context-len 131072 --kv-memory 40GiB");
  EXPECT_EQ(plan["kv_bytes_per_request"], 4'837'146'624ull);
  EXPECT_EQ(plan["kv_bytes_per_request_uniform"], 9'663'676'416ull);
  EXPECT_EQ(plan["num_blocks"], 72'817);
  EXPECT_EQ(run("plan --model gpt-oss-20b --gpu h100-80gb").exit_code, 2) << "hybrid presets take --kv-memory";
  EXPECT_EQ(run("plan --model llama-2-7b --kv-memory 1GiB --chunk 8").exit_code, 2) << "--chunk is for hybrid presets";
}

}  // namespace
