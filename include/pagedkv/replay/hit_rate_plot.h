// Hit rate against cache capacity, one curve per (trace, policy), drawn by gnuplot (Debian's
// gnuplot-nox) into SVG or PNG, chosen by the output's extension.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "pagedkv/replay/cache_replay.h"

namespace pagedkv {

struct HitRatePlotOptions {
  std::string title;  // empty: a title naming the block size and metric
  bool x_in_tokens = true;  // capacity axis in tokens (else blocks)
  bool token_hit_rate = true;  // y: token hit rate (else block hit rate)
  std::vector<double> marks_x;  // vertical reference lines (same unit as the x axis)
  std::vector<std::string> marks_label;
};

// Runs gnuplot on a script and data written to a temporary directory (removed afterwards).
// Throws Error if gnuplot is missing or fails. Runs with infinite capacity are drawn as dashed
// horizontal lines (the plateau each curve climbs towards).
void write_hit_rate_plot(const std::vector<CacheReplayResult>& runs, const std::filesystem::path& out,
                         const HitRatePlotOptions& options = {});

}  // namespace pagedkv
