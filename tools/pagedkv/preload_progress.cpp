#include "preload_progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "pagedkv/core/progress_bar.h"
#include "pagedkv/model/weight_preload.h"

namespace pagedkv::cli {

void preload_model_weights(const Model& model, int threads) {
  WeightPreloadOptions options;
  options.threads = threads;
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  if (terminal)
    options.progress = [](size_t done, size_t total) {
      const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
      fmt::print(stderr, "\rLoading weights {} {:5.1f} % of {:.2f} GB", progress_bar(fraction, 30), fraction * 100,
                 static_cast<double>(total) / 1e9);
      std::fflush(stderr);
    };
  const WeightPreloadReport r = preload_weights(model.tensors(), options);
  if (terminal && r.preloaded) fmt::print(stderr, "\n");
  const double gb = static_cast<double>(r.bytes) / 1e9;
  if (r.preloaded)
    fmt::print("Weights: {:.2f} GB in memory in {:.2f} s ({:.2f} GB/s)\n", gb, r.seconds,
               r.seconds > 0 ? gb / r.seconds : 0.0);
  else if (!r.skip_reason.empty())
    fmt::print("Weights: not preloaded: {}; pages are read on first use\n", r.skip_reason);
  std::fflush(stdout);
}

}  // namespace pagedkv::cli
