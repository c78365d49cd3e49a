// llama2.c's `run` program as an engine request. run forwards at positions 0..steps-1 with the
// prompt (BOS first) forced, prints the token chosen after each forward from the last prompt
// position on (the one chosen after the last forward is printed but not fed back), and stops
// when it chooses BOS (token 1), which it does not print. On the engine: eos = BOS and
// max_tokens = steps - prompt length + 1 (../shared/models/README.md; `pagedkv generate`).
#pragma once

#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/engine/llm_engine.h"

namespace pagedkv {

// `steps` as run's -n (forwards, prompt included). max_tokens <= 0 when the prompt alone fills
// the steps: nothing is generated (the engine would reject it; callers print the prompt).
GenerationRequest llama2c_run_request(std::vector<TokenId> prompt, int steps, SamplingParams sampling = {});

}  // namespace pagedkv
