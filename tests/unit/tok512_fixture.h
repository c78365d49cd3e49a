// A test fixture with stories260K's tok512 tokenizer (skips when ../shared is absent), for the tests
// of request preparation and of the responses built from token ids.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "golden_support.h"
#include "pagedkv/api/openai_request.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv::api {

class Tok512Fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = testing::models_dir();
    if (dir.empty()) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models is absent (ctest sets it)";
    tokenizer_ = std::make_unique<Tokenizer>((dir / "tok512.bin").string(), 512);
  }
  ModelLimits limits() const { return {"stories260K", 512, 512}; }
  // The tokens that follow `prompt` when `text` (which starts with the prompt's text) is encoded.
  std::vector<TokenId> continuation(const std::vector<TokenId>& prompt, const std::string& text) const {
    std::vector<TokenId> all = tokenizer_->encode(text, true, false);
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), all.begin()));
    return {all.begin() + static_cast<ptrdiff_t>(prompt.size()), all.end()};
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

}  // namespace pagedkv::api
