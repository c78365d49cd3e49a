// Timed replay's time series drawn by gnuplot: pool usage (%) on the left axis, running and
// waiting requests on the right, against simulated time. SVG or PNG by the output's extension.
#pragma once

#include <filesystem>
#include <string>

#include "pagedkv/replay/timed_replay.h"

namespace pagedkv {

// Throws Error if gnuplot is missing or fails, UsageError for an empty timeline.
void write_timeline_plot(const TimedReplayResult& result, const std::filesystem::path& out,
                         const std::string& title = "");

}  // namespace pagedkv
