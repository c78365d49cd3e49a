// End-to-end tests of the built `pagedkv` tool: ctest sets PAGEDKV_BIN to it. CliTest skips when
// that is unset (a test binary run by hand) and runs the tool through the shell.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace pagedkv::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout, and stderr too when asked
};

// Runs a shell command; its standard output and exit code.
inline CliResult run_command(const std::string& command) {
  CliResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("PAGEDKV_BIN");
    if (bin == nullptr || *bin == '\0') GTEST_SKIP() << "PAGEDKV_BIN is not set (run through ctest)";
    bin_ = bin;
    ASSERT_TRUE(std::filesystem::exists(bin_)) << "PAGEDKV_BIN names a missing file: " << bin_;
  }
  // `pagedkv ARGS`; stderr is part of the output when `with_stderr`, else dropped.
  CliResult pagedkv(const std::string& args, bool with_stderr = true) const {
    return run_command("'" + bin_ + "' " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
  }
  std::string bin_;
};

}  // namespace pagedkv::testing
