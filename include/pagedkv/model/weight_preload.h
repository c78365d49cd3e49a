// Reading a model's weights into memory before the first request.
//
// A GGUF file is memory-mapped: without this, its pages are read from disk (or at least mapped,
// one fault per 4 KiB page) by the first forward pass that touches them, so the first request
// after a start pays for loading the model. Weights the runner repacks at load are read then
// anyway; those it reads in place (the block formats, embeddings, norms) would not be.
// preload_weights populates the page tables of every tensor the runner reads (Linux's
// MADV_POPULATE_READ; older kernels: one read per page), on several threads, reporting progress.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "pagedkv/model/transformer_weights.h"

namespace pagedkv {

struct WeightPreloadReport {
  size_t bytes = 0;  // of the tensors, page-rounded, overlaps counted once
  double seconds = 0;
  bool preloaded = false;  // false: skipped (skip_reason says why), pages come on first use
  std::string skip_reason;
};

struct WeightPreloadOptions {
  int threads = 1;
  // Called on the calling thread about every progress_interval_seconds while workers read, and
  // once at the end: (bytes done, bytes in all).
  std::function<void(size_t, size_t)> progress;
  double progress_interval_seconds = 0.2;
  // Skipped when the weights exceed this share of the machine's physical memory: reading them
  // all would only evict the first ones again.
  double max_share_of_memory = 0.9;
};

// Brings every present tensor of `weights` into memory (see above). Never throws for a failed
// populate of a range (the pages then come on first use); the report says what was done.
WeightPreloadReport preload_weights(const TransformerWeights& weights, const WeightPreloadOptions& options);

}  // namespace pagedkv
