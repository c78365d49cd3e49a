// The llama2.c checkpoint loader: header validation, exact size checks (shared and separate
// classifier), round trips through write_llama2c_checkpoint, and the real stories260K file.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/random_model.h"
#include "test_model_support.h"

namespace pagedkv {
namespace {

using testing::TempDir;

ModelConfig small_config(bool shared) {
  ModelConfig c;
  c.dim = 16;
  c.hidden_dim = 24;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 32;
  c.seq_len = 8;
  c.shared_classifier = shared;
  return c;
}

std::vector<char> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void set_header_field(std::vector<char>& bytes, int field, int32_t value) {
  std::memcpy(bytes.data() + 4 * field, &value, 4);
}

// Opening must throw FormatError whose message contains every one of `needles`.
void expect_format_error(const std::filesystem::path& p, std::initializer_list<std::string> needles) {
  try {
    Llama2cCheckpoint ck(p.string());
    ADD_FAILURE() << "opening " << p << " did not throw";
  } catch (const FormatError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Llama2cCheckpoint, RoundTripsSharedAndSeparateClassifier) {
  TempDir tmp;
  for (bool shared : {true, false}) {
    auto model = make_random_model(small_config(shared), 3);
    const auto path = tmp.path() / (shared ? "shared.bin" : "separate.bin");
    write_llama2c_checkpoint(path.string(), model->config(), model->weights());
    Llama2cCheckpoint ck(path.string());
    EXPECT_EQ(ck.config(), model->config());
    EXPECT_EQ(ck.file_bytes(), Llama2cCheckpoint::expected_file_bytes(model->config()));
    EXPECT_EQ(ck.file_bytes(), std::filesystem::file_size(path));
    const size_t n = llama2c_body_floats(ck.config());
    // Everything but the legacy RoPE tables (zeros in the file) matches the generated weights.
    EXPECT_EQ(0, std::memcmp(ck.weights().token_embedding, model->weights().token_embedding,
                             static_cast<size_t>(ck.weights().rms_final - ck.weights().token_embedding + 16) * 4));
    if (shared) {
      EXPECT_EQ(ck.weights().wcls, ck.weights().token_embedding);
    } else {
      EXPECT_EQ(ck.weights().wcls + 32 * 16, ck.weights().token_embedding + n);  // wcls is last
      EXPECT_EQ(0, std::memcmp(ck.weights().wcls, model->weights().wcls, 32 * 16 * 4));
    }
    EXPECT_EQ(ck.source(), path.string());
  }
}

TEST(Llama2cCheckpoint, RejectsTruncatedAndOversizedFiles) {
  TempDir tmp;
  auto model = make_random_model(small_config(true), 3);
  const auto good = tmp.path() / "good.bin";
  write_llama2c_checkpoint(good.string(), model->config(), model->weights());
  const auto bytes = read_bytes(good);
  const std::string expected = std::to_string(bytes.size());
  const auto bad = tmp.path() / "bad.bin";

  write_bytes(bad, std::vector<char>(bytes.begin(), bytes.begin() + 10));
  expect_format_error(bad, {"truncated", "header needs 28 bytes", "has 10"});

  write_bytes(bad, std::vector<char>(bytes.begin(), bytes.end() - 4));
  expect_format_error(bad, {"truncated", expected, std::to_string(bytes.size() - 4), "4 missing"});

  auto longer = bytes;
  longer.insert(longer.end(), 8, '\0');
  write_bytes(bad, longer);
  expect_format_error(bad, {"oversized", expected, std::to_string(bytes.size() + 8), "8 extra"});

  write_bytes(bad, {});
  expect_format_error(bad, {"truncated", "has 0"});
}

TEST(Llama2cCheckpoint, NegativeVocabNeedsTheSeparateClassifier) {
  TempDir tmp;
  auto model = make_random_model(small_config(true), 3);
  const auto path = tmp.path() / "m.bin";
  write_llama2c_checkpoint(path.string(), model->config(), model->weights());
  auto bytes = read_bytes(path);
  set_header_field(bytes, 5, -32);  // claims a separate wcls the file does not have
  write_bytes(path, bytes);
  const size_t want = bytes.size() + 32 * 16 * 4;
  expect_format_error(path, {"truncated", "separate classifier", std::to_string(want), std::to_string(bytes.size())});

  // And a separate-classifier file relabelled as shared has the classifier's bytes too many.
  auto sep = make_random_model(small_config(false), 3);
  write_llama2c_checkpoint(path.string(), sep->config(), sep->weights());
  bytes = read_bytes(path);
  set_header_field(bytes, 5, 32);
  write_bytes(path, bytes);
  expect_format_error(path, {"oversized", std::to_string(32 * 16 * 4) + " extra"});
}

TEST(Llama2cCheckpoint, RejectsInconsistentHeaders) {
  TempDir tmp;
  auto model = make_random_model(small_config(true), 3);
  const auto path = tmp.path() / "m.bin";
  write_llama2c_checkpoint(path.string(), model->config(), model->weights());
  const auto good = read_bytes(path);
  struct Case {
    int field;
    int32_t value;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {0, 0, {"dim must be positive, got 0"}},
      {1, -5, {"hidden_dim must be positive, got -5"}},
      {2, 0, {"n_layers must be positive"}},
      {3, 0, {"n_heads must be positive"}},
      {4, -1, {"n_kv_heads must be positive"}},
      {5, 0, {"vocab_size must be non-zero"}},
      {6, 0, {"seq_len must be positive"}},
      {3, 3, {"dim (16) is not divisible by n_heads (3)"}},
      {4, 3, {"n_heads (4) is not divisible by n_kv_heads (3)"}},
      {4, 8, {"n_heads (4) is not divisible by n_kv_heads (8)"}},  // more KV heads than query heads
      {0, 20, {"head_dim", "must be even"}},  // 20 / 4 = 5
      {1, 0x7fffffff, {"truncated"}},  // a size far beyond the file
  };
  for (const auto& c : cases) {
    auto bytes = good;
    set_header_field(bytes, c.field, c.value);
    if (c.field == 0 && c.value == 20) set_header_field(bytes, 3, 4);
    write_bytes(path, bytes);
    try {
      Llama2cCheckpoint ck(path.string());
      ADD_FAILURE() << "field " << c.field << " = " << c.value << " was accepted";
    } catch (const FormatError& e) {
      for (const auto& n : c.needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
  // Fields whose product overflows 64 bits are reported, not wrapped around.
  auto bytes = good;
  for (int f : {0, 1, 2}) set_header_field(bytes, f, 0x7ffffff0);
  set_header_field(bytes, 3, 8);
  set_header_field(bytes, 4, 8);
  write_bytes(path, bytes);
  expect_format_error(path, {"2^64"});
}

TEST(Llama2cCheckpoint, MissingFileIsAnError) {
  EXPECT_THROW(Llama2cCheckpoint("/nonexistent/pagedkv/model.bin"), Error);
}

TEST(Llama2cCheckpoint, LoadsStories260K) {
  PAGEDKV_REQUIRE_MODELS(dir);
  Llama2cCheckpoint ck((dir / "stories260K.bin").string());
  const ModelConfig& c = ck.config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.num_parameters(), 260032);
  EXPECT_EQ(ck.file_bytes(), 1056540u);
  // README offsets: wq starts at byte 132,380 and rms_final at 1,039,900.
  const auto* base = reinterpret_cast<const char*>(ck.weights().token_embedding) - 28;
  EXPECT_EQ(reinterpret_cast<const char*>(ck.weights().wq) - base, 132380);
  EXPECT_EQ(reinterpret_cast<const char*>(ck.weights().w3) - base, 819740);
  EXPECT_EQ(reinterpret_cast<const char*>(ck.weights().rms_final) - base, 1039900);
  // KV footprint from the README: 1,280 bytes per token over all layers at fp32.
  EXPECT_EQ(c.kv_cache_spec(16).bytes_per_token_per_layer() * 5, 1280u);
}

}  // namespace
}  // namespace pagedkv
