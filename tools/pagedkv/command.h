// Subcommands register themselves: each tools/pagedkv/cmd_*.cpp defines one static
// CommandRegistration, so adding a subcommand touches no other file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace pagedkv::cli {

struct Command {
  std::string name;
  std::string description;
  // Adds the subcommand's options to `sub` and returns the function that runs it (exit code).
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& command_registry();

struct CommandRegistration {
  explicit CommandRegistration(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace pagedkv::cli
