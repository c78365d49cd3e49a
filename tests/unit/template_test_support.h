// Shared helpers of the template tests: the chat-template oracle in ../shared/chat_templates (real
// templates, conversations and the text Python's jinja2 renders for each; its README says how
// they were made) and the variables a conversation renders with.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedkv/template/template.h"

namespace pagedkv::testing {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

// ../shared/chat_templates, or empty when PAGEDKV_SHARED_DIR is unset or lacks it.
inline fs::path chat_templates_dir() {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  if (shared == nullptr) return {};
  fs::path dir = fs::path(shared) / "chat_templates";
  return fs::exists(dir / "expected.jsonl") ? dir : fs::path();
}

#define PAGEDKV_REQUIRE_CHAT_TEMPLATES(dir)                                              \
  const ::std::filesystem::path dir = ::pagedkv::testing::chat_templates_dir();          \
  if (dir.empty())                                                                       \
  GTEST_SKIP() << "PAGEDKV_SHARED_DIR/chat_templates is absent; set PAGEDKV_SHARED_DIR " \
                  "to the shared folder (ctest does)"

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<ordered_json> read_jsonl(const fs::path& path) {
  std::vector<ordered_json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(ordered_json::parse(line));
  return rows;
}

// The oracle's fixed clock: 2026-01-15 09:30:00 (a Thursday).
inline std::tm oracle_date() {
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 0;
  t.tm_mday = 15;
  t.tm_hour = 9;
  t.tm_min = 30;
  t.tm_wday = 4;
  t.tm_yday = 14;
  return t;
}

inline jinja::RenderOptions oracle_options() {
  jinja::RenderOptions options;
  options.clock = oracle_date;
  return options;
}

// The variables transformers passes: messages, tools (none without tools), documents=None,
// add_generation_prompt, the template's special tokens, then the conversation's template kwargs.
inline ordered_json render_variables(const ordered_json& conversation, const ordered_json& special_tokens) {
  ordered_json vars = ordered_json::object();
  vars["messages"] = conversation["messages"];
  vars["tools"] = conversation.contains("tools") ? conversation["tools"] : ordered_json(nullptr);
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = conversation["add_generation_prompt"];
  for (const auto& [k, v] : special_tokens.items()) vars[k] = v;
  if (conversation.contains("template_kwargs"))
    for (const auto& [k, v] : conversation["template_kwargs"].items()) vars[k] = v;
  return vars;
}

// The oracle folder, loaded.
struct ChatTemplateOracle {
  std::map<std::string, std::string> templates;  // name -> source
  std::map<std::string, ordered_json> conversations;
  ordered_json special_tokens;
  std::vector<ordered_json> expected;

  explicit ChatTemplateOracle(const fs::path& dir) {
    for (const auto& entry : fs::directory_iterator(dir / "templates"))
      if (entry.path().extension() == ".jinja") templates[entry.path().stem().string()] = read_text(entry.path());
    for (auto& c : read_jsonl(dir / "conversations.jsonl")) conversations[c["id"].get<std::string>()] = c;
    special_tokens = ordered_json::parse(read_text(dir / "special_tokens.json"));
    expected = read_jsonl(dir / "expected.jsonl");
  }

  ordered_json tokens_of(const std::string& name) const {
    return special_tokens.contains(name) ? special_tokens[name] : ordered_json::object();
  }
};

}  // namespace pagedkv::testing
