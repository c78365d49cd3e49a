// The llama2.c goldens of ../shared/models (see the README there): where they are, which runs
// they record, and their token ids and text. The one loader of the model, engine and tier tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv::testing {

namespace fs = std::filesystem;

// ../shared/models, or empty when PAGEDKV_SHARED_DIR is unset or lacks the model.
inline fs::path models_dir() {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  if (shared == nullptr) return {};
  fs::path dir = fs::path(shared) / "models";
  return fs::exists(dir / "stories260K.bin") && fs::exists(dir / "tok512.bin") ? dir : fs::path{};
}

#define PAGEDKV_REQUIRE_MODELS(dir)                                                     \
  const ::std::filesystem::path dir = ::pagedkv::testing::models_dir();                 \
  if (dir.empty())                                                                      \
  GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models (stories260K.bin, tok512.bin) is absent; " \
                  "set PAGEDKV_SHARED_DIR to the shared folder (ctest does)"

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<TokenId> read_ids(const fs::path& p) {
  std::istringstream in(read_text(p));
  std::vector<TokenId> ids;
  for (TokenId id; in >> id;) ids.push_back(id);
  return ids;
}

// The three goldens: `run -t 0.0 -n steps -i prompt`.
struct Golden {
  std::string name;  // file stem in golden/
  std::string prompt;  // empty = no -i
  int steps = 0;  // -n
  std::vector<TokenId> ids;  // BOS + prompt + generated (the stopping BOS kept); empty until loaded
};
inline std::vector<Golden> goldens() {
  return {{"once_upon_a_time.n200", "Once upon a time", 200, {}},
          {"no_prompt.n256", "", 256, {}},
          {"tom_and_lily.n256", "Tom and Lily went to the beach", 256, {}}};
}

// The goldens with their ids read from `dir`/golden (a missing file fails the calling test).
inline std::vector<Golden> load_goldens(const fs::path& dir) {
  std::vector<Golden> out = goldens();
  for (Golden& g : out) {
    g.ids = read_ids(dir / "golden" / (g.name + ".ids"));
    EXPECT_FALSE(g.ids.empty()) << "golden " << g.name << " has no ids under " << dir;
  }
  return out;
}

}  // namespace pagedkv::testing
