#include "pagedkv/replay/hit_rate_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "gnuplot.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
void write_hit_rate_plot(const std::vector<CacheReplayResult>& runs, const std::filesystem::path& out,
                         const HitRatePlotOptions& options) {
  if (runs.empty()) throw UsageError("plot: no runs to draw");
  const std::string terminal = gnuplot::terminal_for(out, 900, 620);

  // One curve per (trace, policy), finite capacities ascending. Infinite runs give plateaus, one
  // per trace when every policy reaches the same one (as they must: nothing is evicted).
  std::set<std::string> traces, policies;
  for (const CacheReplayResult& r : runs) {
    traces.insert(r.trace);
    policies.insert(r.policy);
  }
  auto label = [&](const CacheReplayResult& r) {
    if (traces.size() > 1 && policies.size() > 1) return r.trace + " (" + r.policy + ")";
    return traces.size() > 1 ? r.trace : r.policy;
  };
  std::map<std::string, std::vector<const CacheReplayResult*>> curves;
  std::map<std::string, std::vector<const CacheReplayResult*>> plateaus_by_trace;
  for (const CacheReplayResult& r : runs) {
    if (r.infinite()) plateaus_by_trace[r.trace].push_back(&r);
    else curves[label(r)].push_back(&r);
  }
  std::map<std::string, const CacheReplayResult*> plateaus;
  for (auto& [trace, list] : plateaus_by_trace) {
    const bool all_equal = std::all_of(list.begin(), list.end(),
                                       [first = list.front()](auto* r) { return r->hit_blocks == first->hit_blocks; });
    if (all_equal) plateaus[traces.size() > 1 ? trace : std::string("all policies")] = list.front();
    else
      for (auto* r : list) plateaus[label(*r)] = r;
  }
  const int block_size = runs.front().block_size;
  auto x_of = [&](const CacheReplayResult& r) {
    return static_cast<double>(r.capacity_blocks) * (options.x_in_tokens ? r.block_size : 1);
  };
  auto y_of = [&](const CacheReplayResult& r) {
    return 100.0 * (options.token_hit_rate ? r.token_hit_rate() : r.block_hit_rate());
  };

  gnuplot::TempDir dir;
  const auto data_path = dir.path() / "hit_rate.dat";
  {
    std::ofstream data(data_path);
    for (auto& [key, list] : curves) {
      std::sort(list.begin(), list.end(), [&](auto* a, auto* b) { return a->capacity_blocks < b->capacity_blocks; });
      data << "# " << key << "\n";
      for (const CacheReplayResult* r : list) data << fmt::format("{} {:.4f}\n", x_of(*r), y_of(*r));
      data << "\n\n";
    }
  }
  const std::string metric = options.token_hit_rate ? "token hit rate" : "block hit rate";
  const std::string title =
      options.title.empty()
          ? fmt::format("Prefix-cache {} vs capacity (block size {}, cache-only replay)", metric, block_size)
          : options.title;
  std::string script;
  script += fmt::format("set terminal {}\nset output {}\n", terminal, gnuplot::quoted(out.string()));
  // Trace names hold underscores: text from data is "noenhanced" (no sub/superscripts).
  script += fmt::format("set title {} noenhanced\n", gnuplot::quoted(title));
  script += fmt::format("set xlabel {}\n", gnuplot::quoted(options.x_in_tokens ? "cache capacity (tokens, log scale)"
                                                                               : "cache capacity (blocks, log scale)"));
  script += fmt::format("set ylabel {}\n", gnuplot::quoted(metric + " (%)"));
  script +=
      "set logscale x\nset format x '10^{%L}'\nset grid\nset key below left Left reverse maxrows 4 height 1.5\nset "
      "yrange [0:*]\n";
  // The x range spans the finite capacities (and marks); plateaus are drawn across it.
  double x_min = 0, x_max = 0;
  for (const auto& [key, list] : curves)
    for (const CacheReplayResult* r : list) {
      x_min = x_min == 0 ? x_of(*r) : std::min(x_min, x_of(*r));
      x_max = std::max(x_max, x_of(*r));
    }
  for (double m : options.marks_x) {
    x_min = x_min == 0 ? m : std::min(x_min, m);
    x_max = std::max(x_max, m);
  }
  if (x_min > 0 && x_max > x_min) script += fmt::format("set xrange [{}:{}]\n", x_min, x_max);
  for (size_t i = 0; i < options.marks_x.size(); ++i) {
    script +=
        fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb 'gray40'\n", options.marks_x[i]);
    if (i < options.marks_label.size())
      script += fmt::format("set label {} at {},graph 0.97 right offset -0.5,0 textcolor rgb 'gray30' noenhanced\n",
                            gnuplot::quoted(options.marks_label[i]), options.marks_x[i]);
  }
  std::vector<std::string> plots;
  size_t index = 0;
  int color = 1;
  std::map<std::string, int> color_of;
  for (auto& [key, list] : curves) {
    color_of[key] = color;
    plots.push_back(fmt::format("{} index {} using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc {} title {} noenhanced",
                                gnuplot::quoted(data_path.string()), index++, color++, gnuplot::quoted(key)));
  }
  for (auto& [key, r] : plateaus) {
    const std::string c = color_of.contains(key)  ? fmt::format("{}", color_of[key])
                          : key == "all policies" ? std::string("rgb 'gray30'")
                                                  : fmt::format("{}", color++);
    plots.push_back(fmt::format("{:.4f} with lines dt 2 lc {} title {} noenhanced", y_of(*r), c,
                                gnuplot::quoted(key + ", infinite cache")));
  }
  script += "plot ";
  for (size_t i = 0; i < plots.size(); ++i) script += (i ? ", \\\n     " : "") + plots[i];
  script += "\n";
  gnuplot::run(script, dir, out);
}

}  // namespace pagedkv
