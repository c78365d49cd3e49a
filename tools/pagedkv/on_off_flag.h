// An on/off setting as two flags, `--name` and `--no-name`, with its default in the help text.
// (CLI11's negatable flag "--name,!--no-name" prints the negation's value, "{false}", where a
// reader looks for the default.)
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace pagedkv::cli {

inline void add_on_off_flag(CLI::App& app, const std::string& on, const std::string& off, bool& value,
                            const std::string& description) {
  const std::string help = description + " (default: " + (value ? on : off) + ")";
  app.add_flag_callback(
      on, [&value] { value = true; }, help);
  app.add_flag_callback(
      off, [&value] { value = false; }, "the opposite of " + on);
}

}  // namespace pagedkv::cli
