// GGUF models served by LLMEngine: tiny-gemma2 (sliding-window layers 0 and 2, full layers 1 and
// 3) runs with two KV-cache groups, its sliding layers release the blocks that leave the window,
// and the three reference prompts served together, with prefix caching and small blocks, give
// llama.cpp's greedy ids. tiny-llama (one group) the same.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "pagedkv/core/error.h"
#include "pagedkv/engine/llama2c_run_request.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/model_file.h"
#include "pagedkv/model/gguf_model.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

namespace fs = std::filesystem;

fs::path gguf_dir() {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  return fs::path(env ? env : "../shared") / "models" / "gguf";
}

struct Reference {
  std::vector<TokenId> prompt, generated;
};

Reference load_reference(const std::string& model, const std::string& prompt) {
  std::ifstream in(gguf_dir() / "ref" / (model + "." + prompt + ".json"));
  const auto j = nlohmann::json::parse(in);
  return {j["prompt_ids"].get<std::vector<TokenId>>(), j["generated_ids"].get<std::vector<TokenId>>()};
}

void serve_references(const std::string& name, int block_size, bool prefix_caching) {
  SCOPED_TRACE(name + " block size " + std::to_string(block_size));
  GgufModel model((gguf_dir() / (name + ".gguf")).string());
  EngineConfig cfg;
  cfg.block_size = block_size;
  cfg.enable_prefix_caching = prefix_caching;
  cfg.check_invariants = true;
  cfg.num_blocks = block_size == 16 ? 60 : 200;
  LLMEngine engine(model, cfg);
  EXPECT_EQ(engine.manager().num_groups(), model.config().num_kv_cache_groups());
  std::map<uint64_t, Reference> refs;
  for (const char* prompt : {"p5_once_upon_a_time", "p40_no_prompt", "p150_tom_and_lily"}) {
    Reference r = load_reference(name, prompt);
    GenerationRequest g;
    g.prompt = r.prompt;
    g.sampling.temperature = 0;
    g.stop.max_tokens = static_cast<int>(r.generated.size());
    refs[engine.add_request(std::move(g)).value] = std::move(r);
  }
  bool saw_released_block = false;
  std::vector<RequestOutput> done;
  while (engine.has_unfinished()) {
    for (RequestOutput& o : engine.step())
      if (o.finished) done.push_back(std::move(o));
    // A sliding layer's table holds the null block where the window has moved past.
    if (engine.manager().num_groups() == 2)
      for (const auto& [id, ref] : refs) {
        const auto table = engine.manager().get_block_ids(RequestId{id}, 1);
        if (!table.empty() && table.front().value == 0) saw_released_block = true;
      }
  }
  ASSERT_EQ(done.size(), 3u);
  for (const RequestOutput& o : done) EXPECT_EQ(o.output, refs.at(o.id.value).generated) << "request " << o.id.value;
  if (engine.manager().num_groups() == 2) {
    EXPECT_TRUE(saw_released_block);
  }
}

TEST(GgufEngine, Gemma2ServesWithSlidingAndFullGroups) {
  if (!fs::exists(gguf_dir() / "ref")) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models/gguf is absent; skipping";
  testing::ScopedKernelThreads threads(1);
  GgufModel probe((gguf_dir() / "tiny-gemma2.f32.gguf").string());
  const ModelConfig& c = probe.config();
  ASSERT_EQ(c.num_kv_cache_groups(), 2);
  EXPECT_TRUE(c.is_sliding_layer(0));
  EXPECT_FALSE(c.is_sliding_layer(1));
  EXPECT_EQ(c.kv_arena_layers(), 2);
  EXPECT_EQ(c.arena_layer(3), 1);
  const auto groups = c.kv_cache_groups(16);
  EXPECT_EQ(groups[0].spec.kind, AttentionKind::kFull);
  EXPECT_EQ(groups[1].spec.kind, AttentionKind::kSlidingWindow);
  EXPECT_EQ(groups[1].spec.sliding_window, 32);
  serve_references("tiny-gemma2.f32", 16, true);
  serve_references("tiny-gemma2.f32", 4, false);
}

TEST(GgufEngine, LlamaServesTheReferencePromptsTogether) {
  if (!fs::exists(gguf_dir() / "ref")) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models/gguf is absent; skipping";
  testing::ScopedKernelThreads threads(1);
  serve_references("tiny-llama.f32", 16, true);
  serve_references("tiny-qwen2.f32", 8, true);
}

TEST(GgufEngine, WeightsDigestCoversGgufTensors) {
  if (!fs::exists(gguf_dir() / "ref")) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models/gguf is absent; skipping";
  GgufModel a((gguf_dir() / "tiny-llama.f32.gguf").string());
  GgufModel a2((gguf_dir() / "tiny-llama.f32.gguf").string());
  GgufModel b((gguf_dir() / "tiny-llama.q8_0.gguf").string());
  GgufModel c((gguf_dir() / "tiny-qwen2.f32.gguf").string());
  EXPECT_EQ(model_weights_digest(a), model_weights_digest(a2));
  EXPECT_NE(model_weights_digest(a), model_weights_digest(b));
  EXPECT_NE(model_weights_digest(a), model_weights_digest(c));
}

// load_model_file: a GGUF file brings its tokenizer; stories260Ktok512.gguf through the engine
// renders the golden text byte for byte, as the llama2.c files do.
TEST(GgufEngine, LoadModelFileServesTheGoldenTextFromTheGgufAlone) {
  const fs::path models = gguf_dir().parent_path();
  if (!fs::exists(models / "stories260Ktok512.gguf")) GTEST_SKIP() << "shared models absent; skipping";
  testing::ScopedKernelThreads threads(1);
  LoadedModel m = load_model_file((models / "stories260Ktok512.gguf").string(), "", ModelFileOptions{512});
  ASSERT_TRUE(m.is_gguf);
  ASSERT_NE(m.tokenizer, nullptr);
  LLMEngine engine(*m.model, EngineConfig{});
  SamplingParams greedy;
  greedy.temperature = 0;
  engine.add_request(llama2c_run_request(m.tokenizer->encode("Once upon a time", true), 200, greedy));
  const auto done = engine.run_to_completion();
  ASSERT_EQ(done.size(), 1u);
  std::vector<TokenId> ids = done[0].prompt;
  ids.insert(ids.end(), done[0].output.begin(), done[0].output.end());
  std::ifstream txt(models / "golden" / "once_upon_a_time.n200.txt");
  const std::string golden((std::istreambuf_iterator<char>(txt)), std::istreambuf_iterator<char>());
  EXPECT_EQ(m.tokenizer->render(ids) + "\n", golden);
  // A llama2.c checkpoint has no tokenizer inside: the one given, else tok<vocab>.bin beside it
  // (tok512.bin here); alone in a directory, it cannot load.
  const std::filesystem::path alone = std::filesystem::path(::testing::TempDir()) / "pagedkv-checkpoint-alone";
  std::filesystem::create_directories(alone);
  std::filesystem::copy_file(models / "stories260K.bin", alone / "stories260K.bin",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_THROW(load_model_file((alone / "stories260K.bin").string()), ConfigError);
  std::filesystem::remove_all(alone);
  EXPECT_EQ(load_model_file((models / "stories260K.bin").string()).tokenizer->vocab_size(), 512);
  LoadedModel bin = load_model_file((models / "stories260K.bin").string(), (models / "tok512.bin").string());
  EXPECT_FALSE(bin.is_gguf);
  EXPECT_EQ(bin.tokenizer->encode("Once upon a time", true), m.tokenizer->encode("Once upon a time", true));
  EXPECT_EQ(model_weights_digest(*bin.model) == model_weights_digest(*m.model), false);  // different formats
}

// A small llama-architecture GGUF for the loader's error tests.
GgufWriter tiny_llama_writer(const std::string& arch = "llama", TensorType matrix_type = TensorType::kF32) {
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_u32(arch + ".context_length", 64);
  w.add_u32(arch + ".embedding_length", 64);
  w.add_u32(arch + ".block_count", 1);
  w.add_u32(arch + ".feed_forward_length", 96);
  w.add_u32(arch + ".attention.head_count", 4);
  w.add_u32(arch + ".attention.head_count_kv", 2);
  std::vector<float> v(64 * 96, 0.01f);
  auto m = [&](const std::string& name, int64_t cols, int64_t rows, TensorType t) {
    w.add_tensor_f32(name, t, {cols, rows}, std::span(v).first(static_cast<size_t>(cols * rows)));
  };
  m("token_embd.weight", 64, 32, matrix_type);
  w.add_tensor_f32("output_norm.weight", TensorType::kF32, {64}, std::span(v).first(64));
  w.add_tensor_f32("blk.0.attn_norm.weight", TensorType::kF32, {64}, std::span(v).first(64));
  w.add_tensor_f32("blk.0.ffn_norm.weight", TensorType::kF32, {64}, std::span(v).first(64));
  m("blk.0.attn_q.weight", 64, 64, matrix_type);
  m("blk.0.attn_k.weight", 64, 32, matrix_type);
  m("blk.0.attn_v.weight", 64, 32, matrix_type);
  m("blk.0.attn_output.weight", 64, 64, matrix_type);
  m("blk.0.ffn_gate.weight", 64, 96, matrix_type);
  m("blk.0.ffn_up.weight", 64, 96, matrix_type);
  m("blk.0.ffn_down.weight", 96, 64, matrix_type);
  return w;
}

std::string load_error(const GgufWriter& w) {
  const auto bytes = w.bytes();
  try {
    GgufModel model(std::make_unique<GgufFile>(bytes, "tiny.gguf"));
    return "";
  } catch (const FormatError& e) {
    return e.what();
  }
}

const std::vector<float>& v_small() {
  static const std::vector<float> v(64, 1.0f);
  return v;
}

TEST(GgufModelLoader, NamesWhatIsWrong) {
  EXPECT_EQ(load_error(tiny_llama_writer()), "");
  EXPECT_EQ(load_error(tiny_llama_writer("llama", TensorType::kQ8_0)), "");
  EXPECT_NE(load_error(tiny_llama_writer("mamba")).find("unsupported architecture 'mamba'"), std::string::npos);
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  EXPECT_NE(load_error(w).find("lacks the key 'llama.embedding_length'"), std::string::npos);
  // A missing tensor: qwen2 needs q/k/v biases the llama writer does not write.
  EXPECT_NE(load_error(tiny_llama_writer("qwen2")).find("lacks the tensor 'blk.0.attn_q.bias'"), std::string::npos);
  // An unsupported weight type and a wrong shape.
  GgufWriter q4k = tiny_llama_writer();
  std::vector<std::byte> block(144 * 64);
  q4k.add_tensor("output.weight", TensorType::kQ4_K, {256, 36}, std::span(block).first(144 * 36));
  EXPECT_NE(load_error(q4k).find("shape"), std::string::npos);
  GgufWriter unsupported;
  unsupported.add_string("general.architecture", "llama");
  for (const char* k :
       {"context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count"})
    unsupported.add_u32(std::string("llama.") + k, std::string(k) == "embedding_length" ? 256 : 4);
  // LongRoPE needs both factor sets.
  GgufWriter long_rope = tiny_llama_writer("phi3");
  long_rope.add_tensor_f32("rope_factors_long.weight", TensorType::kF32, {8}, std::span(v_small()).first(8));
  EXPECT_NE(load_error(long_rope).find("lacks the tensor 'rope_factors_short.weight'"), std::string::npos);
  GgufWriter moe = tiny_llama_writer("qwen3moe");
  EXPECT_NE(load_error(moe).find("lacks the key 'qwen3moe.expert_count'"), std::string::npos);
  moe.add_u32("qwen3moe.expert_count", 4);
  moe.add_u32("qwen3moe.expert_used_count", 2);
  moe.add_u32("qwen3moe.expert_feed_forward_length", 32);
  moe.add_u32("qwen3moe.expert_gating_func", 2);  // sigmoid
  EXPECT_NE(load_error(moe).find("qwen3moe.expert_gating_func = 2 is not supported"), std::string::npos);
  // Q8_K is only ever an activation format in ggml: no weight of that type can be run.
  unsupported.add_tensor("token_embd.weight", TensorType::kQ8_K, {256, 4}, std::span(block).first(292 * 4));
  EXPECT_NE(load_error(unsupported).find("type Q8_K, which pagedkv cannot run"), std::string::npos);
}

}  // namespace
}  // namespace pagedkv
