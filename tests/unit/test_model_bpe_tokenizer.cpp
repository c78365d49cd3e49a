// The byte-level BPE tokenizer on small vocabularies written here (no shared files needed): the
// pre-tokenizer patterns, UTF-8 repair, merges by rank against a naive reference on random texts,
// special tokens (user-defined cut out of text, control only as a template's marker), BOS/EOS,
// end-of-generation ids, decoding split characters, and named errors for bad metadata. Against
// llama.cpp's own answers on real vocabularies: test_model_gguf_tokenizer.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/bpe_pretokenizer.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/model/format/gguf_writer.h"

namespace pagedkv {
namespace {

using Words = std::vector<std::string_view>;

TEST(BpePreTokenizer, Gpt2KeepsEveryCharacterAndSplitsAsItsPattern) {
  const BpePreTokenizer pre("gpt-2");
  EXPECT_EQ(pre.split("Hello world's  123\n\nx"), (Words{"Hello", " world", "'s", " ", " 123", "\n", "\n", "x"}));
  // Text no alternative matches (a lone newline before a letter) is a word of its own.
  EXPECT_EQ(pre.split("a\nb"), (Words{"a", "\n", "b"}));
  EXPECT_EQ(pre.split("don't"), (Words{"don", "'t"}));
  EXPECT_EQ(pre.split("DON'T"), (Words{"DON", "'", "T"}));  // gpt-2's contractions are lower case only
  EXPECT_EQ(pre.split("  "), (Words{"  "}));
  EXPECT_TRUE(pre.split("").empty());
}

TEST(BpePreTokenizer, Llama3AndQwen2DifferInDigits) {
  const BpePreTokenizer llama3("llama-bpe"), qwen2("qwen2");
  EXPECT_EQ(llama3.split("12345 x"), (Words{"123", "45", " x"}));
  EXPECT_EQ(qwen2.split("12345 x"), (Words{"1", "2", "3", "4", "5", " x"}));
  EXPECT_EQ(llama3.split("DON'T"), (Words{"DON", "'T"}));  // case-insensitive contractions
  EXPECT_EQ(llama3.split("a\n\n b"), (Words{"a", "\n\n", " b"}));
  EXPECT_EQ(llama3.split("(hi)..\n"), (Words{"(hi", ")..\n"}));
  // U+0085 (NEL) is White_Space, as in llama.cpp (PCRE2's own \s would leave it out).
  EXPECT_EQ(llama3.split("a\u0085\u0085b"), (Words{"a", "\u0085", "\u0085b"}));
  // Letters and numbers of other scripts.
  EXPECT_EQ(llama3.split("Привет мир ١٢٣٤"), (Words{"Привет", " мир", " ", "١٢٣", "٤"}));
}

TEST(BpePreTokenizer, UnknownNamesAreNamed) {
  try {
    BpePreTokenizer pre("no-such-pre");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("llama-bpe"), std::string::npos);
  }
}

TEST(BpePreTokenizer, SanitizeUtf8ReadsAsLlamaCpp) {
  EXPECT_EQ(sanitize_utf8("plain é 🙂"), "plain é 🙂");
  EXPECT_EQ(sanitize_utf8("a\xFF"
                          "b"),
            "a\uFFFD"
            "b");
  EXPECT_EQ(sanitize_utf8("\xC3"), "\uFFFD");  // truncated at the end
  EXPECT_EQ(sanitize_utf8("\xC3(x"), "\uFFFD(x");  // a bad continuation: one byte replaced
  EXPECT_EQ(sanitize_utf8("\xC1\x81"), "A");  // overlong: the character it encodes
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\uFFFD");  // a surrogate
  EXPECT_EQ(sanitize_utf8("\xF7\xBF\xBF\xBF"), "\uFFFD");  // above U+10FFFF
}

// GPT-2's stand-in character for a byte, written independently of the tokenizer's table.
std::string byte_char(int b) {
  int cp = b;
  if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string mapped(std::string_view text) {
  std::string out;
  for (char c : text) out += byte_char(static_cast<unsigned char>(c));
  return out;
}

// A vocabulary: the 256 byte characters (ids 0..255), then the merged tokens, then specials.
struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // "left right", rank = index
  TinyVocab() {
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(byte_char(b));
      types.push_back(1);
    }
  }
  int add(const std::string& piece, int32_t type = 1) {
    tokens.push_back(piece);
    types.push_back(type);
    return static_cast<int>(tokens.size()) - 1;
  }
  int merge(std::string_view left, std::string_view right) {  // plain text; adds the merged token
    merges.push_back(mapped(left) + " " + mapped(right));
    return add(mapped(std::string(left) + std::string(right)));
  }
  std::vector<std::byte> file(const std::string& pre, int bos = -1, int eos = -1, int add_bos = -1) const {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", pre);
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    w.add_string_array("tokenizer.ggml.merges", merges);
    if (bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
    if (eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
    if (add_bos >= 0) w.add_bool("tokenizer.ggml.add_bos_token", add_bos == 1);
    return w.bytes();
  }
};

int id_of_byte(char c) { return static_cast<unsigned char>(c); }

TEST(GgufBpeTokenizer, MergesLowestRankFirst) {
  TinyVocab v;
  const int he = v.merge("h", "e");  // rank 0
  v.merge("t", "h");  // rank 1: would make "th" if applied first
  const int the = v.merge("t", "he");  // rank 2
  const int sp_the = v.merge(" ", "the");  // rank 3
  const auto bytes = v.file("gpt-2");
  const GgufBpeTokenizer tok(GgufFile(bytes, "tiny"));
  EXPECT_EQ(tok.encode("the the", false), (std::vector<TokenId>{the, sp_the}));
  EXPECT_EQ(tok.encode("he", false), (std::vector<TokenId>{he}));
  EXPECT_EQ(tok.encode("th", false), (std::vector<TokenId>{he + 1}));
  EXPECT_EQ(tok.encode("tx", false), (std::vector<TokenId>{id_of_byte('t'), id_of_byte('x')}));
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.encode("he", true), (std::vector<TokenId>{he}));  // gpt-2: no BOS by default
}

// Naive reference BPE: repeatedly merge the adjacent pair of lowest rank, leftmost on ties.
std::vector<std::string> reference_bpe(const std::vector<std::string>& chars, const std::vector<std::string>& merges) {
  std::vector<std::string> syms = chars;
  for (;;) {
    size_t best = SIZE_MAX, best_rank = SIZE_MAX;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const auto it = std::find(merges.begin(), merges.end(), syms[i] + " " + syms[i + 1]);
      const auto rank = static_cast<size_t>(it - merges.begin());
      if (it != merges.end() && rank < best_rank) best = i, best_rank = rank;
    }
    if (best == SIZE_MAX) return syms;
    syms[best] += syms[best + 1];
    syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

TEST(GgufBpeTokenizer, RandomTextsMatchNaiveMergesAndDecodeBack) {
  // Random merges over a small alphabet, then random texts: every word's ids are those of the
  // naive reference, and decoding gives the text back.
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "c", "é", " ", "\n", "1", "!"};
  TinyVocab v;
  std::vector<std::string> pieces(alphabet.begin(), alphabet.end());
  for (int i = 0; i < 60; ++i) {
    const std::string& l = pieces[rng() % pieces.size()];
    const std::string& r = pieces[rng() % pieces.size()];
    const std::string m = mapped(l) + " " + mapped(r);
    if (std::find(v.merges.begin(), v.merges.end(), m) != v.merges.end()) continue;
    v.merge(l, r);
    pieces.push_back(l + r);
  }
  const auto bytes = v.file("gpt-2");
  const GgufBpeTokenizer tok(GgufFile(bytes, "tiny"));
  const BpePreTokenizer pre("gpt-2");
  for (int t = 0; t < 300; ++t) {
    std::string text;
    const size_t len = rng() % 24;
    for (size_t i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<TokenId> expected;
    for (std::string_view word : pre.split(text)) {
      std::vector<std::string> chars;
      const std::string m = mapped(word);
      for (size_t i = 0; i < m.size();) {
        const size_t n = (static_cast<unsigned char>(m[i]) & 0x80) ? 2 : 1;
        chars.push_back(m.substr(i, n));
        i += n;
      }
      for (const std::string& s : reference_bpe(chars, v.merges)) {
        const auto it = std::find(v.tokens.begin(), v.tokens.end(), s);
        ASSERT_NE(it, v.tokens.end()) << s;
        expected.push_back(static_cast<TokenId>(it - v.tokens.begin()));
      }
    }
    const auto got = tok.encode(text, true);
    ASSERT_EQ(got, expected) << text;
    for (TokenId id : got) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    EXPECT_EQ(tok.detokenize(got), text);
  }
}

TEST(GgufBpeTokenizer, SpecialTokensBosEosAndEndOfGeneration) {
  TinyVocab v;
  const int think = v.add("<think>", 4);  // user-defined: cut out of plain text
  const int im_start = v.add("<|im_start|>", 3);  // control: only as a template's marker
  const int im_end = v.add("<|im_end|>", 3);
  const int eot_text = v.add("<|eot_id|>", 4);  // an end-of-generation text typed user-defined: control
  const int bos = v.add("<|begin|>", 3);
  const int eos = v.add("<|end|>", 3);
  const auto bytes = v.file("llama-bpe", bos, eos);
  const GgufBpeTokenizer tok(GgufFile(bytes, "tiny"));
  auto plain = [&](std::string_view s) {
    std::vector<TokenId> ids;
    for (char c : s) ids.push_back(id_of_byte(c));
    return ids;
  };
  // llama-bpe adds BOS unless the file says otherwise.
  std::vector<TokenId> want = {bos, id_of_byte('a'), think, id_of_byte('b')};
  const auto tail = plain("<|im_end|>");
  EXPECT_EQ(tok.encode("a<think>b", true), want);
  const auto got = tok.encode("<|im_end|><|eot_id|>", false);
  auto both = plain("<|im_end|>");
  for (TokenId id : plain("<|eot_id|>")) both.push_back(id);
  EXPECT_EQ(got, both);
  // Template markers become their tokens; a marker that is no token is text.
  const std::vector<PromptPart> parts = {
      {"<|im_start|>", true}, {"user\nhi", false}, {"<|im_end|>", true}, {"<none>", true}, {"<|im_end|>", false}};
  std::vector<TokenId> expected = {bos, im_start};
  for (TokenId id : plain("user\nhi")) expected.push_back(id);
  expected.push_back(im_end);
  for (TokenId id : plain("<none>")) expected.push_back(id);
  for (TokenId id : tail) expected.push_back(id);
  EXPECT_EQ(tok.encode_parts(parts, true), expected);
  // Ending tokens: EOS, then the end-of-generation texts, whatever their type in the file.
  auto ends = tok.end_of_generation_ids();
  std::sort(ends.begin(), ends.end());
  std::vector<TokenId> want_ends = {im_end, eot_text, eos};
  std::sort(want_ends.begin(), want_ends.end());
  EXPECT_EQ(ends, want_ends);
  // Decoding: control tokens give nothing, user-defined ones their text.
  EXPECT_EQ(tok.detokenize(std::vector<TokenId>{bos, im_start, think, id_of_byte(' '), eos}), "<think> ");
  // add_bos_token = false wins over llama-bpe's default.
  const auto no_bos = v.file("llama-bpe", bos, eos, 0);
  EXPECT_EQ(GgufBpeTokenizer(GgufFile(no_bos, "tiny")).encode("a", true), plain("a"));
}

TEST(GgufBpeTokenizer, DecodesACharacterSplitOverTokens) {
  TinyVocab v;
  const auto bytes = v.file("gpt-2");
  const GgufBpeTokenizer tok(GgufFile(bytes, "tiny"));
  const auto ids = tok.encode("é🙂", false);  // no merges: one token per byte
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(tok.decode_piece(-1, ids[0]), "\xC3");
  EXPECT_EQ(tok.decode_piece(ids[0], ids[1]), "\xA9");
  EXPECT_EQ(tok.detokenize(ids), "é🙂");
  // Invalid UTF-8 is read as U+FFFD, as llama.cpp does.
  EXPECT_EQ(tok.detokenize(tok.encode("a\xFF", false)), "a\uFFFD");
}

TEST(GgufBpeTokenizer, BadMetadataIsNamed) {
  TinyVocab v;
  auto expect_error = [](const std::vector<std::byte>& bytes, const std::string& needle) {
    try {
      (void)make_gguf_tokenizer(GgufFile(bytes, "bad"));
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(v.file("gpt-3"), "gpt-3");
  expect_error(v.file("gpt-2", 999), "bos_token_id");
  TinyVocab bad_merge = v;
  bad_merge.merges.push_back("ab");
  expect_error(bad_merge.file("gpt-2"), "merge 0");
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w.add_string_array("tokenizer.ggml.merges", {});
  const int32_t one_type[] = {1};
  w.add_i32_array("tokenizer.ggml.token_type", one_type);
  expect_error(w.bytes(), "token types");
  // A well-formed file is the BPE tokenizer through the factory.
  const auto good = v.file("qwen2");
  EXPECT_NE(dynamic_cast<const GgufBpeTokenizer*>(make_gguf_tokenizer(GgufFile(good, "good")).get()), nullptr);
}

}  // namespace
}  // namespace pagedkv
