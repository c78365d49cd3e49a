// The GGUF tokenizers against llama.cpp: every line of vocab/expected.<name>.jsonl (150 tricky
// strings, add_special = true) and of llama.cpp's own .inp/.out tests (add_special = false) for the
// SentencePiece vocabularies (tok512, llama-spm, phi-3) and the byte-level BPE ones (gpt-2,
// llama-bpe, qwen3); decoding round trips; the TextTokenizer interface over the llama2.c tokenizer
// agrees with run.c's rendering. (Tokenizer unit tests that need no shared files:
// test_model_bpe_tokenizer.cpp.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  return fs::path(env ? env : "../shared") / "models";
}

fs::path vocab_file(const std::string& name) {
  return name == "tok512" ? models_dir() / "stories260Ktok512.gguf"
                          : models_dir() / "gguf" / "vocab" / ("ggml-vocab-" + name + ".gguf");
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::ostringstream s;
  for (TokenId id : ids) s << id << ' ';
  return s.str();
}

class LlamaCppVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppVocab, ReproducesLlamaCppOnEveryExpectedLine) {
  const std::string name = GetParam();
  if (!fs::exists(vocab_file(name))) GTEST_SKIP() << vocab_file(name) << " is absent; skipping";
  GgufFile file(vocab_file(name).string());
  const std::unique_ptr<TextTokenizer> made = make_gguf_tokenizer(file);
  const TextTokenizer& tok = *made;
  const bool bpe = dynamic_cast<const GgufBpeTokenizer*>(made.get()) != nullptr;
  EXPECT_EQ(bpe, name == "gpt-2" || name == "llama-bpe" || name == "qwen3");
  std::ifstream in(models_dir() / "gguf" / "vocab" / ("expected." + name + ".jsonl"));
  int lines = 0, mismatches = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string text = j["text"];
    const auto expected = j["ids"].get<std::vector<TokenId>>();
    const auto got = tok.encode(text, true);
    ++lines;
    if (got != expected) {
      ++mismatches;
      ADD_FAILURE() << name << " " << j["id"].get<std::string>() << " " << nlohmann::json(text).dump()
                    << "\n  expected " << ids_text(expected) << "\n  got      " << ids_text(got);
    }
    // Decoding gives the text back: byte-level BPE always; SentencePiece wherever llama.cpp's ids
    // hold no <unk> (and the text has no U+2581 of its own, which it cannot tell from a space).
    if (bpe || (std::find(expected.begin(), expected.end(), 0) == expected.end() && got == expected &&
                text.find("\xE2\x96\x81") == std::string::npos)) {
      EXPECT_EQ(tok.detokenize(got), text) << j["id"].get<std::string>() << " " << ids_text(got);
    }
  }
  EXPECT_EQ(lines, 150);
  std::printf("%s: %d of %d expected lines reproduced\n", name.c_str(), lines - mismatches, lines);
  // llama.cpp's own test texts, tokenized without BOS.
  const fs::path inp = models_dir() / "gguf" / "vocab" / ("ggml-vocab-" + name + ".gguf.inp");
  if (!fs::exists(inp)) return;
  std::ifstream ti(inp), to(models_dir() / "gguf" / "vocab" / ("ggml-vocab-" + name + ".gguf.out"));
  std::stringstream all;
  all << ti.rdbuf();
  std::string contents = all.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = contents.find(sep, pos);
    if (next == std::string::npos) break;
    texts.push_back(contents.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::string out_line;
  int test_lines = 0, test_mismatches = 0;
  for (const std::string& text : texts) {
    ASSERT_TRUE(std::getline(to, out_line));
    std::stringstream ids(out_line);
    std::vector<TokenId> expected;
    for (TokenId id; ids >> id;) expected.push_back(id);
    const auto got = tok.encode(text, false);
    ++test_lines;
    if (got != expected) ++test_mismatches;
    EXPECT_EQ(got, expected) << nlohmann::json(text).dump();
    if (bpe) {
      EXPECT_EQ(tok.detokenize(got), text);
    }
  }
  EXPECT_GT(test_lines, 0);
  std::printf("%s: %d of %d llama.cpp test lines reproduced\n", name.c_str(), test_lines - test_mismatches, test_lines);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, LlamaCppVocab,
                         ::testing::Values("tok512", "llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(GgufTokenizer, Tok512MatchesTheLlama2cTokenizer) {
  if (!fs::exists(vocab_file("tok512")) || !fs::exists(models_dir() / "tok512.bin"))
    GTEST_SKIP() << "shared models absent";
  GgufFile file(vocab_file("tok512").string());
  GgufTokenizer gguf(file);
  Tokenizer bin((models_dir() / "tok512.bin").string(), 512);
  for (const char* text :
       {"Once upon a time", "Tom and Lily went to the beach", "", "héllo wörld 🙂", "a  b\n\tc"}) {
    EXPECT_EQ(gguf.encode(text, true), bin.encode(text, true)) << text;
    // Both through the one interface.
    const TextTokenizer& a = gguf;
    const TextTokenizer& b = bin;
    EXPECT_EQ(a.encode(text, false), b.encode(text, false));
  }
  EXPECT_EQ(gguf.bos_id(), 1);
  EXPECT_EQ(gguf.eos_id(), 2);
  EXPECT_EQ(gguf.vocab_size(), 512);
  // The goldens render the same through either tokenizer.
  for (const char* golden : {"once_upon_a_time.n200", "no_prompt.n256", "tom_and_lily.n256"}) {
    std::ifstream in(models_dir() / "golden" / (std::string(golden) + ".ids"));
    std::vector<TokenId> ids;
    for (TokenId id; in >> id;) ids.push_back(id);
    if (!ids.empty() && ids.back() == 1) ids.pop_back();  // a run that stopped on BOS does not print it
    std::ifstream txt(models_dir() / "golden" / (std::string(golden) + ".txt"));
    std::stringstream expected;
    expected << txt.rdbuf();
    EXPECT_EQ(gguf.render(ids) + "\n", expected.str()) << golden;
    EXPECT_EQ(bin.render(ids) + "\n", expected.str()) << golden;
  }
}

TEST(GgufTokenizer, MissingOrUnsupportedTokenizersAreNamed) {
  GgufWriter none;
  none.add_string("general.architecture", "llama");
  const auto b1 = none.bytes();
  EXPECT_THROW(GgufTokenizer(GgufFile(b1, "none")), FormatError);
  GgufWriter bpe;
  bpe.add_string("tokenizer.ggml.model", "gpt2");
  bpe.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  const auto b2 = bpe.bytes();
  try {
    GgufTokenizer t{GgufFile(b2, "bpe")};
    FAIL() << "gpt2 tokenizer accepted as SentencePiece";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("byte-level BPE"), std::string::npos);
  }
  // Without merges the BPE tokenizer names what is missing.
  try {
    (void)make_gguf_tokenizer(GgufFile(b2, "bpe"));
    FAIL() << "a BPE tokenizer without merges accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos) << e.what();
  }
  GgufWriter bad;
  bad.add_string("tokenizer.ggml.model", "llama");
  bad.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  const float scores[] = {0.0f};
  bad.add_f32_array("tokenizer.ggml.scores", scores);
  const auto b3 = bad.bytes();
  EXPECT_THROW(GgufTokenizer(GgufFile(b3, "bad")), FormatError);
}

}  // namespace
}  // namespace pagedkv
