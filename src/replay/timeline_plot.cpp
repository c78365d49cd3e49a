#include "pagedkv/replay/timeline_plot.h"

#include <fmt/format.h>

#include <fstream>

#include "gnuplot.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

void write_timeline_plot(const TimedReplayResult& result, const std::filesystem::path& out, const std::string& title) {
  if (result.timeline.empty()) throw UsageError("plot: the timed replay recorded no timeline");
  const std::string terminal = gnuplot::terminal_for(out, 900, 560);
  gnuplot::TempDir dir;
  const auto data_path = dir.path() / "timeline.dat";
  {
    std::ofstream data(data_path);
    for (const TimelinePoint& p : result.timeline)
      data << fmt::format("{:.3f} {:.3f} {} {} {}\n", p.time_s, 100.0 * p.pool_usage, p.running, p.waiting, p.swapped);
  }
  const std::string heading =
      title.empty() ? fmt::format("Timed replay of {} ({} cost model)", result.trace, result.cost_model) : title;
  const std::string data = gnuplot::quoted(data_path.string());
  std::string script;
  script += fmt::format("set terminal {}\nset output {}\n", terminal, gnuplot::quoted(out.string()));
  script += fmt::format("set title {} noenhanced\n", gnuplot::quoted(heading));
  script += "set xlabel 'simulated time (s)'\nset ylabel 'KV pool usage (%)'\nset y2label 'requests'\n";
  script += "set yrange [0:100]\nset y2range [0:*]\nset ytics nomirror\nset y2tics\nset grid\n";
  script += "set key below left Left reverse maxrows 2 height 1.2\n";
  script += fmt::format(
      "plot {0} using 1:2 with lines lw 2 lc 1 title 'pool usage (%, left axis)', \\\n"
      "     {0} using 1:3 axes x1y2 with lines lw 1.5 lc 2 title 'running requests (right axis)', \\\n"
      "     {0} using 1:4 axes x1y2 with lines lw 1.5 lc 7 title 'waiting requests (right axis)'\n",
      data);
  gnuplot::run(script, dir, out);
}

}  // namespace pagedkv
