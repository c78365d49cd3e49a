// A gtest fixture for engine tests on the stories260K goldens: the checkpoint, tokenizer and
// golden ids are loaded once per suite (every test skips when ../shared is absent), and an
// engine's output is put in the goldens' form for comparison.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "golden_support.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv::testing {

class GoldenEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path dir = models_dir();
    if (dir.empty()) return;
    model_ = std::make_unique<Llama2cCheckpoint>((dir / "stories260K.bin").string());
    tokenizer_ = std::make_unique<Tokenizer>((dir / "tok512.bin").string(), 512);
    goldens_ = load_goldens(dir);
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "../shared/models not found (set PAGEDKV_SHARED_DIR); skipping golden tests";
  }

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
  // `n` filler requests: random-ish prompts (BOS first) of 40, 70, 100, ... tokens and 120 greedy
  // output tokens, that compete with the goldens for blocks.
  static void add_fillers(LLMEngine& engine, int n) {
    for (int k = 0; k < n; ++k) {
      GenerationRequest f;
      f.prompt.push_back(1);
      for (int t = 0; t < 40 + 30 * k; ++t) f.prompt.push_back(static_cast<TokenId>(3 + (t * 37 + k * 101) % 500));
      f.sampling.temperature = 0.0f;
      f.stop.max_tokens = 120;
      engine.add_request(f);
    }
  }
  // Prompt + output, with the stopping BOS appended as the goldens keep it.
  static std::vector<TokenId> full_ids(const RequestOutput& o) {
    std::vector<TokenId> ids = o.prompt;
    ids.insert(ids.end(), o.output.begin(), o.output.end());
    if (o.finish_reason == FinishReason::kStop) ids.push_back(1);
    return ids;
  }

  static inline std::unique_ptr<Llama2cCheckpoint> model_;
  static inline std::unique_ptr<Tokenizer> tokenizer_;
  static inline std::vector<Golden> goldens_;
};

}  // namespace pagedkv::testing
