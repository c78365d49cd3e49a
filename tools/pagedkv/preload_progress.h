// `serve` and `generate` read the model's weights into memory before they take requests, with a
// progress bar on a terminal and one summary line either way.
#pragma once

#include "pagedkv/model/model.h"

namespace pagedkv::cli {

// Preloads `model`'s weights on `threads` threads (see pagedkv/model/weight_preload.h); prints
// "Weights: X GB in memory in S s" or why it was skipped.
void preload_model_weights(const Model& model, int threads);

}  // namespace pagedkv::cli
