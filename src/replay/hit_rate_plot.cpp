#include "pagedkv/replay/hit_rate_plot.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

// gnuplot strings are single-quoted; a quote inside is doubled.
std::string gp_string(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Removes a directory tree when it goes out of scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() / fmt::format("pagedkv-plot-{}-{}", ::getpid(), counter++);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

void write_hit_rate_plot(const std::vector<CacheReplayResult>& runs, const std::filesystem::path& out,
                         const HitRatePlotOptions& options) {
  if (runs.empty()) throw UsageError("plot: no runs to draw");
  const std::string ext = out.extension().string();
  std::string terminal;
  if (ext == ".svg") terminal = "svg size 900,620 dynamic font 'Helvetica,13' background rgb 'white'";
  else if (ext == ".png") terminal = "pngcairo size 1100,760 font 'Helvetica,12'";
  else throw UsageError(fmt::format("plot: output '{}' must end in .svg or .png", out.string()));
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    throw Error("plot: gnuplot not found (Debian package gnuplot-nox)");

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
    const bool all_equal = std::all_of(list.begin(), list.end(), [&](auto* r) { return r->hit_blocks == list.front()->hit_blocks; });
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

  TempDir dir;
  const auto data_path = dir.path / "hit_rate.dat";
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
  const std::string title = options.title.empty()
      ? fmt::format("Prefix-cache {} vs capacity (block size {}, cache-only replay)", metric, block_size)
      : options.title;
  std::string script;
  script += fmt::format("set terminal {}\nset output {}\n", terminal, gp_string(out.string()));
  // Trace names hold underscores: text from data is "noenhanced" (no sub/superscripts).
  script += fmt::format("set title {} noenhanced\n", gp_string(title));
  script += fmt::format("set xlabel {}\n", gp_string(options.x_in_tokens ? "cache capacity (tokens, log scale)"
                                                                       : "cache capacity (blocks, log scale)"));
  script += fmt::format("set ylabel {}\n", gp_string(metric + " (%)"));
  script += "set logscale x\nset format x '10^{%L}'\nset grid\nset key below left Left reverse maxrows 4 height 1.5\nset yrange [0:*]\n";
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
    script += fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb 'gray40'\n", options.marks_x[i]);
    if (i < options.marks_label.size())
      script += fmt::format("set label {} at {},graph 0.97 right offset -0.5,0 textcolor rgb 'gray30' noenhanced\n",
                            gp_string(options.marks_label[i]), options.marks_x[i]);
  }
  std::vector<std::string> plots;
  size_t index = 0;
  int color = 1;
  std::map<std::string, int> color_of;
  for (auto& [key, list] : curves) {
    color_of[key] = color;
    plots.push_back(fmt::format("{} index {} using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc {} title {} noenhanced",
                                gp_string(data_path.string()), index++, color++, gp_string(key)));
  }
  for (auto& [key, r] : plateaus) {
    const std::string c = color_of.contains(key) ? fmt::format("{}", color_of[key])
                          : key == "all policies" ? std::string("rgb 'gray30'")
                                                  : fmt::format("{}", color++);
    plots.push_back(fmt::format("{:.4f} with lines dt 2 lc {} title {} noenhanced", y_of(*r), c,
                                gp_string(key + ", infinite cache")));
  }
  script += "plot ";
  for (size_t i = 0; i < plots.size(); ++i) script += (i ? ", \\\n     " : "") + plots[i];
  script += "\n";
  const auto script_path = dir.path / "hit_rate.gp";
  std::ofstream(script_path) << script;
  const std::string cmd =
      fmt::format("gnuplot {} 2>{}", shell_quoted(script_path.string()), shell_quoted((dir.path / "err").string()));
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream err(dir.path / "err");
    std::string msg((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    throw Error(fmt::format("plot: gnuplot failed writing {}: {}", out.string(), msg));
  }
}

}  // namespace pagedkv
