// When each benchmark request is sent: a gamma process with mean rate `request_rate` (requests per
// second) and shape `burstiness` (1 = Poisson; below 1 burstier, above 1 more regular), as
// vllm bench serve draws them; an infinite rate sends everything at time 0.
#pragma once

#include <cstdint>
#include <vector>

namespace pagedkv::loadgen {

// Send times in seconds from the start, non-decreasing. Throws ConfigError for a non-positive
// rate or burstiness.
std::vector<double> arrival_times(int n, double request_rate, double burstiness, uint64_t seed);

}  // namespace pagedkv::loadgen
