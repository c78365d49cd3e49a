// What the benchmarks report of repeated runs: the median (the noise-robust figure) and the
// minimum (the run least disturbed by the rest of the machine).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pagedkv::cli {

// The middle run, or the mean of the two middle runs for an even count; 0 for no runs.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

inline double minimum(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

}  // namespace pagedkv::cli
