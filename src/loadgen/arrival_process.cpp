#include "pagedkv/loadgen/arrival_process.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "pagedkv/core/error.h"

namespace pagedkv::loadgen {

std::vector<double> arrival_times(int n, double request_rate, double burstiness, uint64_t seed) {
  if (!(request_rate > 0))
    throw ConfigError(fmt::format("--request-rate must be positive or inf, got {}", request_rate));
  if (!(burstiness > 0) || std::isinf(burstiness))
    throw ConfigError(fmt::format("--burstiness must be a positive number, got {}", burstiness));
  std::vector<double> times(static_cast<size_t>(std::max(n, 0)), 0.0);
  if (std::isinf(request_rate)) return times;
  // Gamma(shape k, scale 1 / (rate k)) gaps: mean 1 / rate whatever the shape.
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0;
  for (double& x : times) {
    x = t;
    t += gap(rng);
  }
  return times;
}

}  // namespace pagedkv::loadgen
