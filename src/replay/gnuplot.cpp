#include "gnuplot.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "pagedkv/core/error.h"

namespace pagedkv::gnuplot {
namespace {

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

std::string terminal_for(const std::filesystem::path& out, int width, int height) {
  const std::string ext = out.extension().string();
  if (ext == ".svg")
    return fmt::format("svg size {},{} dynamic font 'Helvetica,13' background rgb 'white'", width, height);
  if (ext == ".png") return fmt::format("pngcairo size {},{} font 'Helvetica,12'", width * 11 / 9, height * 11 / 9);
  throw UsageError(fmt::format("plot: output '{}' must end in .svg or .png", out.string()));
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() / fmt::format("pagedkv-plot-{}-{}", ::getpid(), counter++);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void run(const std::string& script, const TempDir& dir, const std::filesystem::path& out) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    throw Error("plot: gnuplot not found (Debian package gnuplot-nox)");
  const auto script_path = dir.path() / "plot.gp";
  const auto err_path = dir.path() / "gnuplot.err";
  std::ofstream(script_path) << script;
  const std::string cmd =
      fmt::format("gnuplot {} 2>{}", shell_quoted(script_path.string()), shell_quoted(err_path.string()));
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream err(err_path);
    const std::string msg((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    throw Error(fmt::format("plot: gnuplot failed writing {}: {}", out.string(), msg));
  }
}

}  // namespace pagedkv::gnuplot
