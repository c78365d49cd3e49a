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

#include "pagedkv/engine/llm_engine.h"
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

}  // namespace
}  // namespace pagedkv
