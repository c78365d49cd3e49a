#include "pagedkv/engine/llama2c_run_request.h"

#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv {

GenerationRequest llama2c_run_request(std::vector<TokenId> prompt, int steps, SamplingParams sampling) {
  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.sampling = sampling;
  g.stop.eos_token_id = Tokenizer::kBos;
  g.stop.max_tokens = steps - static_cast<int>(g.prompt.size()) + 1;
  return g;
}

}  // namespace pagedkv
