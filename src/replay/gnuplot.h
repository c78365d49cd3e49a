// Running gnuplot for replay's plots (internal to src/replay).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace pagedkv::gnuplot {

// A gnuplot single-quoted string literal (a quote inside is doubled).
std::string quoted(std::string_view s);

// "set terminal ..." for an output path ending in .svg or .png; UsageError otherwise.
std::string terminal_for(const std::filesystem::path& out, int width, int height);

// A fresh temporary directory, removed with everything in it when this goes out of scope.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs gnuplot on `script` (written into `dir`). Throws Error naming `out` and gnuplot's
// message if gnuplot is missing or fails.
void run(const std::string& script, const TempDir& dir, const std::filesystem::path& out);

}  // namespace pagedkv::gnuplot
