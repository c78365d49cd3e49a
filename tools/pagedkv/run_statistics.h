// What the benchmarks report of repeated runs: the median (the noise-robust figure) and the
// minimum (the run least disturbed by the rest of the machine).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "pagedkv/core/percentile.h"

namespace pagedkv::cli {

// The middle run, or the mean of the two middle runs for an even count (core/percentile.h's
// 50th percentile); 0 for no runs.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return percentile_of_sorted(v, 50);
}

inline double minimum(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

}  // namespace pagedkv::cli
