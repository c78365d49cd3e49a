// Shared helpers of the grammar tests: vocabularies (a synthetic byte vocabulary, and the real
// ones of the shared GGUF files, read through the model layer's tokenizers and the engine's
// vocabulary builder: the only place these tests include model/ and engine/), a slow reference for the token mask,
// sampling under the mask, and a batch check of outputs with Debian's Python (jsonschema, re).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedkv/engine/grammar_vocabulary.h"
#include "pagedkv/grammar/compiled_grammar.h"
#include "pagedkv/grammar/grammar_matcher.h"
#include "pagedkv/grammar/token_bitmask.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv::testing {

namespace fs = std::filesystem;
namespace g = pagedkv::grammar;

// PAGEDKV_SHARED_DIR, or empty when unset or missing.
inline fs::path grammar_shared_dir() {
  const char* shared = std::getenv("PAGEDKV_SHARED_DIR");
  if (shared == nullptr || !fs::exists(shared)) return {};
  return fs::path(shared);
}

// Every byte 0..255 as a token, a few multi-byte tokens that cross JSON punctuation, and a stop
// token (id 256, no bytes).
inline std::shared_ptr<const g::TokenVocabulary> byte_vocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.emplace_back();  // 256: stop
  for (const char* t : {"\":", "\",\"", "\"}", "{\"", "true", "null", "12",     "ab", "\\u00", "é",
                        "],",  "}]",    " \"", "a\"", "\"a",  "\xC3", "\xA9\"", "-1", "0.5",   "e+"})
    tokens.emplace_back(t);
  return g::TokenVocabulary::create(std::move(tokens), {256});
}

struct LoadedVocabulary {
  std::shared_ptr<const g::TokenVocabulary> vocabulary;
  std::string name;
};

// The bytes each token of a GGUF tokenizer stands for and its end-of-generation ids as stop
// tokens, as the server builds them (engine/grammar_vocabulary.h).
inline LoadedVocabulary load_gguf_vocabulary(const fs::path& path) {
  GgufFile file(path.string());
  std::unique_ptr<TextTokenizer> tok = make_gguf_tokenizer(file);
  return {make_grammar_vocabulary(*tok, tok->end_of_generation_ids(), tok->vocab_size()), path.filename().string()};
}

// The vocabularies the property tests run on that exist here: tok512 always first.
inline std::vector<fs::path> shared_vocabulary_paths(bool include_big) {
  std::vector<fs::path> out;
  const fs::path dir = grammar_shared_dir();
  if (dir.empty()) return out;
  const fs::path tok512 = dir / "models" / "stories260Ktok512.gguf";
  if (fs::exists(tok512)) out.push_back(tok512);
  if (include_big)
    for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen3.gguf"}) {
      const fs::path p = dir / "models" / "gguf" / "vocab" / name;
      if (fs::exists(p)) out.push_back(p);
    }
  return out;
}

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The slow reference: token id is allowed iff stepping its bytes one at a time succeeds (stop
// tokens: iff the grammar can end). Uses accept_bytes + rollback, never the mask.
inline bool reference_allows(g::GrammarMatcher& m, int32_t id) {
  const g::TokenVocabulary& v = m.grammar().vocabulary();
  if (m.is_terminated()) return false;
  if (v.is_stop(id)) return m.can_terminate();
  const std::string_view bytes = v.bytes(id);
  if (bytes.empty()) return false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!m.accept_bytes(bytes.substr(i, 1))) {
      m.rollback(static_cast<int32_t>(i));
      return false;
    }
  }
  m.rollback(static_cast<int32_t>(bytes.size()));
  return true;
}

inline std::vector<int32_t> allowed_ids(std::span<const uint32_t> mask, int32_t vocab_size) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < vocab_size; ++id)
    if (g::bitmask_allows(mask, id)) out.push_back(id);
  return out;
}

struct SampledOutput {
  std::string text;
  bool ended = false;  // a stop token was sampled (else the length cap stopped it)
  bool alive = true;  // the mask never came up empty
};

// Samples under the mask until a stop token or max_tokens: `pick` chooses among the allowed ids
// (never empty); by default uniformly, like a random-weight model at temperature 1.
template <class Pick>
SampledOutput sample_under_mask(g::GrammarMatcher& m, std::mt19937_64& rng, int max_tokens, Pick pick) {
  const g::TokenVocabulary& v = m.grammar().vocabulary();
  std::vector<uint32_t> mask(static_cast<size_t>(v.bitmask_words()));
  SampledOutput out;
  for (int step = 0; step < max_tokens; ++step) {
    m.fill_next_token_bitmask(mask);
    const std::vector<int32_t> ids = allowed_ids(mask, v.size());
    if (ids.empty()) {
      out.alive = false;
      return out;
    }
    const int32_t id = pick(ids, rng);
    if (!m.accept_token(id)) {
      out.alive = false;
      return out;
    }
    if (v.is_stop(id)) {
      out.ended = true;
      return out;
    }
    out.text += v.bytes(id);
  }
  return out;
}

inline SampledOutput sample_under_mask(g::GrammarMatcher& m, std::mt19937_64& rng, int max_tokens) {
  return sample_under_mask(m, rng, max_tokens, [](const std::vector<int32_t>& ids, std::mt19937_64& r) {
    return ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(r)];
  });
}

// Runs `script` with Debian's Python on a JSON file holding `input`; returns the JSON it prints.
inline nlohmann::json run_python(const std::string& script, const nlohmann::json& input) {
  const fs::path dir = fs::temp_directory_path();
  const std::string stem = "pagedkv_grammar_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand());
  const fs::path in = dir / (stem + ".json"), py = dir / (stem + ".py"), out = dir / (stem + ".out");
  std::ofstream(in) << input.dump();
  std::ofstream(py) << script;
  const std::string cmd = "/usr/bin/python3 " + py.string() + " " + in.string() + " > " + out.string();
  const int rc = std::system(cmd.c_str());
  std::ifstream r(out);
  std::stringstream s;
  s << r.rdbuf();
  fs::remove(in);
  fs::remove(py);
  fs::remove(out);
  if (rc != 0) return nlohmann::json();
  return nlohmann::json::parse(s.str(), nullptr, false);
}

inline bool python_has_jsonschema() {
  return std::system("/usr/bin/python3 -c 'import jsonschema' > /dev/null 2>&1") == 0;
}

}  // namespace pagedkv::testing
