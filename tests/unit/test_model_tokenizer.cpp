// The llama2.c tokenizer: file validation, encoding exactly like run.c (dummy prefix, code points,
// byte fallback, best-score leftmost merges), decoding and safe printing, against the README's ids
// and the golden texts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/tokenizer.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

struct Entry {
  float score;
  std::string piece;
};

// Serialises a tokenizer file: int32 max_token_length, then (float score, int32 len, bytes).
std::vector<std::byte> tokenizer_file(int32_t max_len, const std::vector<Entry>& entries) {
  std::vector<std::byte> out;
  auto put = [&out](const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    if (n != 0) std::memcpy(out.data() + at, p, n);
  };
  put(&max_len, 4);
  for (const auto& e : entries) {
    const auto len = static_cast<int32_t>(e.piece.size());
    put(&e.score, 4);
    put(&len, 4);
    put(e.piece.data(), e.piece.size());
  }
  return out;
}

// <unk>, BOS, EOS, then the given pieces from id 3.
std::vector<Entry> with_specials(std::vector<Entry> rest) {
  std::vector<Entry> all = {{0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}};
  all.insert(all.end(), rest.begin(), rest.end());
  return all;
}

Tokenizer make(const std::vector<Entry>& entries, int32_t max_len = 8) {
  return Tokenizer(tokenizer_file(max_len, entries), static_cast<int>(entries.size()), "test");
}

void expect_format_error(std::span<const std::byte> file, int vocab, std::initializer_list<std::string> needles) {
  try {
    Tokenizer t(file, vocab, "bad.bin");
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, MergesTheHighestScoringPairLeftmostFirst) {
  // " " = 3, a = 4, b = 5, ab = 6, ba = 7.
  auto tie = make(with_specials({{0, " "}, {0, "a"}, {0, "b"}, {1, "ab"}, {1, "ba"}}));
  EXPECT_EQ(tie.encode("aba"), (std::vector<TokenId>{1, 3, 6, 4}));  // equal scores: leftmost pair
  auto ba_wins = make(with_specials({{0, " "}, {0, "a"}, {0, "b"}, {1, "ab"}, {2, "ba"}}));
  EXPECT_EQ(ba_wins.encode("aba"), (std::vector<TokenId>{1, 3, 4, 7}));
  // Merges repeat until nothing merges; the dummy prefix takes part like any token.
  auto chain = make(with_specials({{0, " "}, {0, "a"}, {0, "b"}, {3, "ab"}, {2, " ab"}, {1, " abab"}}));
  EXPECT_EQ(chain.encode("abab"), (std::vector<TokenId>{1, 8}));
  // run.c only merges pieces scoring above -1e10.
  auto floor = make(with_specials({{0, " "}, {0, "a"}, {-2e10f, "aa"}}));
  EXPECT_EQ(floor.encode("aa"), (std::vector<TokenId>{1, 3, 4, 4}));
  EXPECT_EQ(tie.encode("aba", false, true), (std::vector<TokenId>{3, 6, 4, 2}));
  EXPECT_EQ(tie.encode(""), (std::vector<TokenId>{1}));
  EXPECT_EQ(tie.encode("", false), (std::vector<TokenId>{}));
  EXPECT_EQ(tie.encode(std::string_view("ab\0ba", 5)), tie.encode("ab"));  // C string: ends at NUL
  // A copy owns its lookup table: it outlives the tokenizer it was copied from.
  auto original = std::make_unique<Tokenizer>(tie);
  const Tokenizer copy = *original;
  original.reset();
  EXPECT_EQ(copy.encode("aba"), (std::vector<TokenId>{1, 3, 6, 4}));
}

TEST(Tokenizer, EncodingNeedsTheSpacePieceAndByteTokens) {
  auto no_space = make(with_specials({{0, "a"}}));
  EXPECT_THROW(no_space.encode("a"), FormatError);
  EXPECT_EQ(no_space.encode(""), (std::vector<TokenId>{1}));
  auto no_bytes = make(with_specials({{0, " "}, {0, "a"}}));
  EXPECT_EQ(no_bytes.encode("a"), (std::vector<TokenId>{1, 3, 4}));
  EXPECT_THROW(no_bytes.encode("z"), FormatError);  // byte fallback 'z' + 3 is not in a 5-token vocab
}

TEST(Tokenizer, ValidatesTheFile) {
  const auto entries = with_specials({{0, " "}, {-1, "ab"}});
  const auto good = tokenizer_file(8, entries);
  EXPECT_NO_THROW(Tokenizer(good, 5, "good"));

  expect_format_error(std::span(good).first(3), 5, {"truncated", "max_token_length", "file has 3 bytes"});
  expect_format_error(std::span(good).first(good.size() - 1), 5,
                      {"truncated at token 4 of 5", "piece bytes", std::to_string(good.size() - 1) + " bytes"});
  expect_format_error(std::span(good).first(good.size() - 4), 5, {"truncated at token 4 of 5", "length"});
  expect_format_error(good, 4, {"oversized", "4 tokens end at byte", std::to_string(good.size()) + " bytes"});
  expect_format_error(good, 6, {"truncated at token 5 of 6", "score"});
  expect_format_error(tokenizer_file(0, entries), 5, {"max_token_length must be positive, got 0"});
  expect_format_error(tokenizer_file(1, entries), 5, {"token 0 has length 5", "max_token_length (1)"});
  auto nan = entries;
  nan[4].score = std::nanf("");
  expect_format_error(tokenizer_file(8, nan), 5, {"token 4 has a non-finite score"});
  auto nul = entries;
  nul[4].piece = std::string("a\0b", 3);
  expect_format_error(tokenizer_file(8, nul), 5, {"token 4 contains a NUL byte"});
  auto negative = good;
  const int32_t minus_one = -1;
  std::memcpy(negative.data() + 4 + 4, &minus_one, 4);  // token 0's length
  expect_format_error(negative, 5, {"token 0 has length -1"});
  EXPECT_THROW(Tokenizer(good, 0, "zero"), UsageError);
  // A vocabulary without room for <s> and </s> (ids 1 and 2), which encode() always uses: the
  // fuzzer's first find (it encoded "1 2" against a 1-piece vocabulary).
  EXPECT_THROW(Tokenizer(good, 1, "one"), FormatError);
  EXPECT_THROW(Tokenizer(good, 2, "two"), FormatError);
  EXPECT_THROW(Tokenizer("/nonexistent/tok.bin", 5), Error);
}

TEST(Tokenizer, DecodesLikeRunC) {
  auto tok =
      make(with_specials({{0, " hi"}, {0, "<0x0A>"}, {0, "<0x41>"}, {0, " <0x42>"}, {0, "<0xe9>"}, {0, "<0x>"}}));
  EXPECT_EQ(tok.decode(1, 3), "hi");  // after BOS the leading space goes
  EXPECT_EQ(tok.decode(5, 3), " hi");
  EXPECT_EQ(tok.decode(3, 4), "\n");  // <0xHH> is the raw byte
  EXPECT_EQ(tok.decode(3, 5), "A");
  EXPECT_EQ(tok.decode(1, 6), "B");  // space stripped first, then parsed as a byte
  EXPECT_EQ(tok.decode(3, 6), " <0x42>");
  EXPECT_EQ(tok.decode(3, 7), "\xe9");  // lower-case hex digits parse too (sscanf %X)
  EXPECT_EQ(tok.decode(3, 8), "<0x>");
  EXPECT_THROW(tok.decode(1, 9), UsageError);

  EXPECT_EQ(Tokenizer::safe_piece("\n"), "\n");
  EXPECT_EQ(Tokenizer::safe_piece("A"), "A");
  EXPECT_EQ(Tokenizer::safe_piece("\x01"), "");
  EXPECT_EQ(Tokenizer::safe_piece("\x7f"), "");
  EXPECT_EQ(Tokenizer::safe_piece("\xe9"), "");  // a lone non-ASCII byte is not printable in the C locale
  EXPECT_EQ(Tokenizer::safe_piece("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(Tokenizer::safe_piece(std::string_view("\0", 1)), "");
  EXPECT_EQ(Tokenizer::safe_piece(""), "");
  EXPECT_EQ(tok.render(std::vector<TokenId>{1, 3, 4, 5, 7, 3}), "hi\nA hi");
}

TEST(Tokenizer, EncodesTheReadmePromptsOfStories260K) {
  PAGEDKV_REQUIRE_MODELS(dir);
  Tokenizer tok((dir / "tok512.bin").string(), 512);
  EXPECT_EQ(tok.max_token_length(), 7);
  EXPECT_EQ(tok.encode("Once upon a time"), (std::vector<TokenId>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.encode("Tom and Lily went to the beach"),
            (std::vector<TokenId>{1, 274, 287, 269, 317, 263, 377, 267, 265, 329, 412, 402}));
  EXPECT_EQ(tok.encode(""), (std::vector<TokenId>{1}));
  EXPECT_EQ(tok.piece(410), " ");
  EXPECT_EQ(tok.piece(265), " the");
  EXPECT_EQ(tok.score(261), -2.0f);
  // A code point in the vocab is one token and prints whole ("\xc3\xa9" is U+00E9, id 485)...
  EXPECT_EQ(tok.encode("\xc3\xa9"), (std::vector<TokenId>{1, 410, 485}));
  EXPECT_EQ(tok.render(tok.encode("\xc3\xa9")), "\xc3\xa9");
  // ...one missing from it (U+4E2D) falls back to its UTF-8 bytes (byte + 3), which run.c then
  // prints as nothing: single non-ASCII bytes are not printable.
  EXPECT_EQ(tok.encode("\xe4\xb8\xad"), (std::vector<TokenId>{1, 410, 0xe4 + 3, 0xb8 + 3, 0xad + 3}));
  EXPECT_EQ(tok.render(tok.encode("\xe4\xb8\xad")), "");
  // A stray continuation byte stands alone; a run of five is grouped 4 + 1, like run.c.
  EXPECT_EQ(tok.encode("\x80"
                       "a",
                       false),
            (std::vector<TokenId>{410, 0x80 + 3, tok.encode("a", false)[1]}));
  EXPECT_EQ(tok.encode("\xf0\x80\x80\x80\x80", false).size(), 6u);
}

TEST(Tokenizer, RendersTheGoldenIdsToTheGoldenTexts) {
  PAGEDKV_REQUIRE_MODELS(dir);
  Tokenizer tok((dir / "tok512.bin").string(), 512);
  for (const auto& g : testing::goldens()) {
    auto ids = testing::read_ids(dir / "golden" / (g.name + ".ids"));
    const auto prompt = tok.encode(g.prompt);
    ASSERT_GE(ids.size(), prompt.size());
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), ids.begin())) << g.name;
    if (ids.back() == Tokenizer::kBos) ids.pop_back();
    EXPECT_EQ(tok.render(ids) + "\n", testing::read_text(dir / "golden" / (g.name + ".txt"))) << g.name;
  }
}

}  // namespace
}  // namespace pagedkv
