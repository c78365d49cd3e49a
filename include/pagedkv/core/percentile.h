// The one percentile definition every report uses: linear interpolation between the closest
// ranks (numpy's default, which `vllm bench serve` reports), so a p50 or p99 from `pagedkv bench
// serve`, `pagedkv demo` and `pagedkv replay` means the same thing.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

namespace pagedkv {

// The p-th percentile (p in [0, 100], clamped) of ascending `sorted` values; 0 for none.
inline double percentile_of_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

// The same of unsorted `values`; NaN for none (a report shows it as missing).
inline double percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  return percentile_of_sorted(values, p);
}

}  // namespace pagedkv
