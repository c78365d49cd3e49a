// pagedkv: the command-line front end. Each subcommand lives in its own cmd_*.cpp.
#include <fmt/core.h>

#include <algorithm>
#include <exception>
#include <map>

#include "command.h"
#include "pagedkv/core/error.h"
#include "pagedkv/version.h"

namespace pagedkv::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace pagedkv::cli

int main(int argc, char** argv) {
  using namespace pagedkv::cli;
  CLI::App app{"pagedkv: paged KV-cache management for LLM inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pagedkv " PAGEDKV_VERSION_STRING);
  auto& registry = command_registry();
  std::sort(registry.begin(), registry.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  std::function<int()> run;
  std::map<std::string, CLI::App*> groups;
  for (auto& cmd : registry) {
    // "bench peer" nests under "bench": groups of related subcommands come from separate files.
    CLI::App* parent = &app;
    std::string name = cmd.name;
    if (auto space = name.find(' '); space != std::string::npos) {
      std::string group = name.substr(0, space);
      name = name.substr(space + 1);
      auto& slot = groups[group];
      if (slot == nullptr) {
        slot = app.add_subcommand(group,
                                  group == "bench" ? "benchmarks that print ratios against an in-run baseline" : group);
        slot->require_subcommand(1);
      }
      parent = slot;
    }
    CLI::App* sub = parent->add_subcommand(name, cmd.description);
    auto runner = cmd.setup(*sub);
    sub->callback([&run, runner] { run = runner; });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const pagedkv::Error& e) {
    fmt::print(stderr, "pagedkv: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "pagedkv: internal error: {}\n", e.what());
    return 3;
  }
}
