// The GGUF reader: every value type round-trips through the writer, and every malformed or
// truncated file is a FormatError naming the problem (never a crash or another exception).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <sys/mman.h>
#include <unistd.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/format/block_formats.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/format/random_gguf.h"
#include "pagedkv/model/format/weight_mix.h"
#include "pagedkv/model/format/weight_quantizers.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/weight_preload.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {
namespace {

using Bytes = std::vector<std::byte>;

GgufWriter small_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_i32("neg", -5);
  w.add_u64("big", 1ull << 40);
  w.add_f32("eps", 1e-5f);
  w.add_bool("flag", true);
  w.add_string_array("tokens", {"a", "bb", ""});
  const float scores[] = {0.5f, -1.0f, 2.0f};
  w.add_f32_array("scores", scores);
  const int32_t types[] = {1, 2, 3};
  w.add_i32_array("types", types);
  std::vector<float> m(64 * 2);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i) * 0.25f - 3.0f;
  w.add_tensor_f32("a.weight", TensorType::kF32, {64, 2}, m);
  w.add_tensor_f32("b.weight", TensorType::kQ8_0, {64, 2}, m);
  w.add_tensor_f32("c.weight", TensorType::kF16, {64, 2}, m);
  return w;
}

// Parses `b`; returns the FormatError message, or "" if it loaded. Any other exception fails.
std::string parse_error(const Bytes& b) {
  try {
    GgufFile f(b, "test.gguf");
    return "";
  } catch (const FormatError& e) {
    return e.what();
  }
}

template <typename T>
void poke(Bytes& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

TEST(GgufReader, RoundTripsEveryValueTypeAndTensor) {
  const Bytes b = small_writer().bytes();
  GgufFile f(b, "test.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 2);
  EXPECT_EQ(f.get_int("neg"), -5);
  EXPECT_EQ(f.get_int("big"), 1ll << 40);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("eps", 0)), 1e-5f);
  EXPECT_TRUE(f.get_bool("flag", false));
  EXPECT_EQ(f.get_int("absent", 7), 7);
  auto tokens = f.at("tokens").strings("tokens");
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[1], "bb");
  EXPECT_EQ(tokens[2], "");
  EXPECT_EQ(f.at("scores").number_at(2), 2.0);
  EXPECT_EQ(f.at("types").int_at(1), 2);
  // Wrong types are named errors.
  EXPECT_THROW(f.get_int("eps"), FormatError);
  EXPECT_THROW(f.get_string("llama.block_count"), FormatError);
  EXPECT_THROW(f.at("scores").strings("scores"), FormatError);
  EXPECT_THROW(f.at("missing"), FormatError);

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensor* a = f.find_tensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(a->rows(), 2);
  EXPECT_EQ(static_cast<size_t>(a->data - f.bytes().data()) % 32, 0u);
  std::vector<float> row(64);
  dequantize_row(a->type, a->data + 64 * 4, row);
  EXPECT_EQ(row[0], 64 * 0.25f - 3.0f);
  const GgufTensor* q = f.find_tensor("b.weight");
  EXPECT_EQ(q->type, TensorType::kQ8_0);
  EXPECT_EQ(q->bytes, 2u * 2 * 34);
  dequantize_row(q->type, q->data, row);
  EXPECT_NEAR(row[5], 5 * 0.25f - 3.0f, 0.03f);
  const GgufTensor* h = f.find_tensor("c.weight");
  dequantize_row(h->type, h->data, row);
  EXPECT_EQ(row[9], 9 * 0.25f - 3.0f);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufReader, Version2ParsesLikeVersion3) {
  GgufWriter w = small_writer();
  w.set_version(2);
  const Bytes b = w.bytes();
  GgufFile f(b, "v2.gguf");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.tensors().size(), 3u);
}

TEST(GgufReader, EveryTruncationIsAFormatError) {
  const Bytes full = small_writer().bytes();
  ASSERT_EQ(parse_error(full), "");
  // The last tensor ends 2*64*2 bytes after its offset; anything shorter cuts into some section.
  GgufFile f(full, "x");
  const GgufTensor& last = f.tensors().back();
  const size_t needed = static_cast<size_t>(last.data - f.bytes().data()) + last.bytes;
  for (size_t n = 0; n < needed; ++n) {
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(parse_error(cut), "") << "truncated to " << n << " bytes";
  }
  // Messages name the section.
  const auto l = small_writer().layout();
  EXPECT_NE(
      parse_error(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(l.header_end + 20))).find("metadata"),
      std::string::npos);
  EXPECT_NE(
      parse_error(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(l.metadata_end + 10))).find("tensor"),
      std::string::npos);
  EXPECT_NE(
      parse_error(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(needed - 1))).find("past the end"),
      std::string::npos);
}

TEST(GgufReader, HeaderErrorsAreNamed) {
  const Bytes good = small_writer().bytes();
  Bytes b = good;
  b[0] = std::byte{'X'};
  EXPECT_NE(parse_error(b).find("magic"), std::string::npos);
  b = good;
  poke<uint32_t>(b, 4, 1);
  EXPECT_NE(parse_error(b).find("version 1"), std::string::npos);
  poke<uint32_t>(b, 4, 4);
  EXPECT_NE(parse_error(b).find("unsupported GGUF version 4"), std::string::npos);
  poke<uint32_t>(b, 4, 0x03000000);
  EXPECT_NE(parse_error(b).find("big-endian"), std::string::npos);
  b = good;
  poke<uint64_t>(b, 8, ~0ull);  // tensor count
  EXPECT_NE(parse_error(b).find("tensor count"), std::string::npos);
  b = good;
  poke<uint64_t>(b, 16, 1ull << 62);  // metadata count
  EXPECT_NE(parse_error(b).find("metadata count"), std::string::npos);
  b = good;
  poke<uint64_t>(b, 16, 100);  // more keys than there are: runs into the tensor infos
  EXPECT_NE(parse_error(b), "");
  b = good;
  poke<uint64_t>(b, 8, 4);  // one tensor info more than written
  EXPECT_NE(parse_error(b), "");
}

TEST(GgufReader, MetadataErrorsAreNamed) {
  auto one_key = [](auto add) {
    GgufWriter w;
    add(w);
    return w.bytes();
  };
  const size_t first = 24;  // the first key starts right after the header
  // Unknown value type.
  Bytes b = one_key([](GgufWriter& w) { w.add_u32("k", 1); });
  poke<uint32_t>(b, first + 8 + 1, 13);
  EXPECT_NE(parse_error(b).find("unknown value type 13"), std::string::npos);
  // A key length beyond the file.
  b = one_key([](GgufWriter& w) { w.add_u32("k", 1); });
  poke<uint64_t>(b, first, 1ull << 40);
  EXPECT_NE(parse_error(b).find("string of"), std::string::npos);
  poke<uint64_t>(b, first, 1000);
  EXPECT_NE(parse_error(b).find("truncated"), std::string::npos);
  // A string value length beyond the file.
  b = one_key([](GgufWriter& w) { w.add_string("k", "abc"); });
  poke<uint64_t>(b, first + 8 + 1 + 4, 99);
  EXPECT_NE(parse_error(b).find("truncated"), std::string::npos);
  // Arrays: unknown element type, array of arrays, overflowing counts.
  const float f3[] = {1, 2, 3};
  b = one_key([&](GgufWriter& w) { w.add_f32_array("k", f3); });
  poke<uint32_t>(b, first + 8 + 1 + 4, 77);
  EXPECT_NE(parse_error(b).find("unknown type 77"), std::string::npos);
  poke<uint32_t>(b, first + 8 + 1 + 4, static_cast<uint32_t>(GgufType::kArray));
  EXPECT_NE(parse_error(b).find("array of arrays"), std::string::npos);
  b = one_key([&](GgufWriter& w) { w.add_f32_array("k", f3); });
  poke<uint64_t>(b, first + 8 + 1 + 4 + 4, (1ull << 62) + 1);  // * 4 bytes overflows 64 bits
  EXPECT_NE(parse_error(b).find("claims"), std::string::npos);
  b = one_key([&](GgufWriter& w) { w.add_string_array("k", {"x", "y"}); });
  poke<uint64_t>(b, first + 8 + 1 + 4 + 4, ~0ull);
  EXPECT_NE(parse_error(b).find("claims"), std::string::npos);
  // Duplicate keys, empty keys, a bad alignment.
  b = one_key([](GgufWriter& w) {
    w.add_u32("k", 1);
    w.add_u32("k", 2);
  });
  EXPECT_NE(parse_error(b).find("appears twice"), std::string::npos);
  b = one_key([](GgufWriter& w) { w.add_u32("", 1); });
  EXPECT_NE(parse_error(b).find("empty name"), std::string::npos);
  b = one_key([](GgufWriter& w) { w.add_u32("general.alignment", 24); });
  EXPECT_NE(parse_error(b).find("power of two"), std::string::npos);
  b = one_key([](GgufWriter& w) { w.add_string("general.alignment", "32"); });
  EXPECT_NE(parse_error(b).find("expected uint32"), std::string::npos);
}

// Byte offset of tensor info `index`'s fields in a writer's output.
struct InfoAt {
  size_t n_dims, dims, type, offset;
};
InfoAt info_at(const GgufWriter& w, const std::vector<std::pair<std::string, int>>& infos, size_t index) {
  size_t at = w.layout().metadata_end;
  for (size_t i = 0;; ++i) {
    const size_t name_end = at + 8 + infos[i].first.size();
    InfoAt r{name_end, name_end + 4, name_end + 4 + 8 * static_cast<size_t>(infos[i].second), 0};
    r.offset = r.type + 4;
    if (i == index) return r;
    at = r.offset + 8;
  }
}

TEST(GgufReader, TensorInfoErrorsAreNamed) {
  const GgufWriter w = small_writer();
  const std::vector<std::pair<std::string, int>> infos{{"a.weight", 2}, {"b.weight", 2}, {"c.weight", 2}};
  const Bytes good = w.bytes();
  const InfoAt a = info_at(w, infos, 0), bq = info_at(w, infos, 1);
  Bytes b = good;
  poke<uint32_t>(b, a.n_dims, 0);
  EXPECT_NE(parse_error(b).find("0 dimensions"), std::string::npos);
  poke<uint32_t>(b, a.n_dims, 5);
  EXPECT_NE(parse_error(b).find("5 dimensions"), std::string::npos);
  b = good;
  poke<uint64_t>(b, a.dims, 0);
  EXPECT_NE(parse_error(b).find("dimension 0 = 0"), std::string::npos);
  b = good;
  poke<uint64_t>(b, a.dims, 1ull << 40);
  poke<uint64_t>(b, a.dims + 8, 1ull << 40);
  EXPECT_NE(parse_error(b).find("2^63"), std::string::npos);
  b = good;
  poke<uint64_t>(b, a.dims + 8, 1000);  // 1000 rows: past the data section
  EXPECT_NE(parse_error(b).find("past the end"), std::string::npos);
  b = good;
  poke<uint32_t>(b, a.type, 99);
  EXPECT_NE(parse_error(b).find("unknown tensor type 99"), std::string::npos);
  b = good;
  poke<uint64_t>(b, bq.dims, 48);  // Q8_0 rows must be whole blocks of 32
  EXPECT_NE(parse_error(b).find("block size 32"), std::string::npos);
  b = good;
  poke<uint64_t>(b, a.offset, 8);
  EXPECT_NE(parse_error(b).find("alignment"), std::string::npos);
  b = good;
  poke<uint64_t>(b, a.offset, 1ull << 60);
  EXPECT_NE(parse_error(b).find("past the end"), std::string::npos);
  b = good;
  poke<uint64_t>(b, bq.offset, 0);  // b starts where a does
  EXPECT_NE(parse_error(b).find("overlap"), std::string::npos);
  // A K-quant tensor: rows must be whole super-blocks of 256, its bytes what its blocks take.
  GgufWriter k;
  const std::vector<std::byte> two_blocks(2 * 144);
  k.add_tensor("blk.0.ffn_up.weight", TensorType::kQ4_K, {128, 4}, two_blocks);
  const std::string half_rows = parse_error(k.bytes());
  EXPECT_NE(half_rows.find("blk.0.ffn_up.weight"), std::string::npos) << half_rows;
  EXPECT_NE(half_rows.find("(Q4_K) has rows of 128 values, not a multiple of its block size 256"), std::string::npos);
  GgufWriter k2;
  k2.add_tensor("output.weight", TensorType::kIQ4_XS, {256, 3}, std::vector<std::byte>(2 * 136));  // 3 rows, 2 blocks
  const std::string short_data = parse_error(k2.bytes());
  EXPECT_NE(short_data.find("'output.weight' (408 bytes"), std::string::npos) << short_data;
  // Duplicate tensor names.
  GgufWriter d;
  const float v[32] = {};
  d.add_tensor_f32("t", TensorType::kF32, {32}, v);
  d.add_tensor_f32("t", TensorType::kF32, {32}, v);
  EXPECT_NE(parse_error(d.bytes()).find("appears twice"), std::string::npos);
}

TEST(GgufReader, RandomCorruptionNeverCrashes) {
  const Bytes good = small_writer().bytes();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % std::min<size_t>(b.size(), 400);  // header, metadata, tensor infos
      b[at] ^= std::byte{static_cast<unsigned char>(1u << (rng() % 8))};
    }
    (void)parse_error(b);  // a FormatError or a valid load; anything else fails the test
  }
}

TEST(GgufReader, OpensFilesAndReportsMissingOnes) {
  const auto path = std::filesystem::temp_directory_path() / ("pagedkv_gguf_" + std::to_string(::getpid()) + ".gguf");
  small_writer().write(path.string());
  EXPECT_TRUE(GgufFile::has_gguf_magic(path.string()));
  {
    GgufFile f(path.string());
    EXPECT_EQ(f.tensors().size(), 3u);
  }
  std::filesystem::remove(path);
  EXPECT_FALSE(GgufFile::has_gguf_magic(path.string()));
  EXPECT_THROW(GgufFile(path.string()), Error);
}

TEST(GgufReader, QuantizersFollowGgmlRounding) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i - 16) * 0.5f;
  BlockQ8_0 q8{};
  quantize_row_q8_0(x, &q8);
  EXPECT_EQ(q8.q[0], -127);  // -8 is the largest magnitude
  std::vector<float> back(32);
  dequantize_row(TensorType::kQ8_0, &q8, back);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(back[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 8.0 / 127);
  // Ties go to even: amax 127 gives id 1, so 2.5 -> 2 and 3.5 -> 4.
  std::vector<float> t(32, 0.0f);
  t[0] = 127.0f;
  t[1] = 2.5f;
  t[2] = 3.5f;
  t[3] = -2.5f;
  quantize_row_q8_0(t, &q8);
  EXPECT_EQ(q8.q[1], 2);
  EXPECT_EQ(q8.q[2], 4);
  EXPECT_EQ(q8.q[3], -2);
  BlockQ4_0 q4{};
  quantize_row_q4_0(x, &q4);
  dequantize_row(TensorType::kQ4_0, &q4, back);
  EXPECT_EQ(back[0], -8.0f);  // the signed maximum maps to nibble 0 exactly
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(back[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 1.0 / 2 + 1e-6);
}

}  // namespace
}  // namespace pagedkv

namespace pagedkv {
namespace {

std::vector<std::filesystem::path> shared_gguf_files() {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  const std::filesystem::path root = env ? env : "../shared";
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (!std::filesystem::exists(root / "models", ec)) return files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "models", ec))
    if (e.path().extension() == ".gguf") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

Bytes read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  Bytes b(std::filesystem::file_size(p));
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return b;
}

TEST(GgufReaderShared, EverySharedFileParsesAndSurvivesCorruption) {
  const auto files = shared_gguf_files();
  if (files.empty()) GTEST_SKIP() << "PAGEDKV_SHARED_DIR/models has no GGUF files; skipping";
  std::mt19937 rng(11);
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    const Bytes good = read_all(path);
    size_t header_bytes = 0;
    {
      GgufFile f(path.string());
      EXPECT_GE(f.version(), 2u);
      EXPECT_NE(f.find("general.architecture"), nullptr);
      header_bytes =
          f.tensors().empty() ? good.size() : static_cast<size_t>(f.tensors().front().data - f.bytes().data());
      for (const GgufTensor& t : f.tensors())
        header_bytes = std::min(header_bytes, static_cast<size_t>(t.data - f.bytes().data()));
    }
    // Truncated copies: at a spread of lengths, including inside the metadata and tensor infos.
    for (int k = 0; k < 40; ++k) {
      const size_t n = k < 20 ? header_bytes * static_cast<size_t>(k) / 20 : rng() % good.size();
      const Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
      (void)parse_error(cut);
    }
    // Bit flips in the header, metadata and tensor infos (where the reader looks).
    for (int k = 0; k < 150; ++k) {
      Bytes b = good;
      b[rng() % header_bytes] ^= std::byte{static_cast<unsigned char>(1u << (rng() % 8))};
      (void)parse_error(b);
    }
  }
}

// Preloading a mixed-type file with stacked experts: every page of every tensor counted once and
// resident afterwards, progress monotonic up to (all, all).
TEST(WeightPreload, BringsEveryTensorPageIntoMemoryOnce) {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  const std::filesystem::path path =
      std::filesystem::path(env ? env : "../shared") / "models/gguf/small-qwen3moe.q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent; skipping";
  const GgufModel model(path.string());
  const TransformerWeights w = model.tensors();
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  std::set<uintptr_t> pages;
  w.for_each_tensor([&](const WeightTensor& t) {
    if (!t.present()) return;
    const auto begin = reinterpret_cast<uintptr_t>(t.data);
    const uintptr_t end = begin + static_cast<uintptr_t>(t.rows) * tensor_row_bytes(t.type, t.cols);
    for (uintptr_t p = begin / page; p <= (end - 1) / page; ++p) pages.insert(p);
  });
  std::vector<std::pair<size_t, size_t>> calls;
  WeightPreloadOptions options;
  options.threads = 3;
  options.progress_interval_seconds = 0.001;
  options.progress = [&](size_t done, size_t total) { calls.emplace_back(done, total); };
  const WeightPreloadReport r = preload_weights(w, options);
  ASSERT_TRUE(r.preloaded) << r.skip_reason;
  EXPECT_EQ(r.bytes, pages.size() * page);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(r.bytes, r.bytes));
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, r.bytes);
    EXPECT_LE(calls[i].first, r.bytes);
    if (i > 0) {
      EXPECT_GE(calls[i].first, calls[i - 1].first);
    }
  }
  size_t missing = 0;
  for (uintptr_t p : pages) {
    unsigned char resident = 0;
    ASSERT_EQ(mincore(reinterpret_cast<void*>(p * page), page, &resident), 0);
    missing += (resident & 1) == 0;
  }
  EXPECT_EQ(missing, 0u);
}

TEST(WeightPreload, SkipsWeightsBeyondTheMemoryShareAndEmptyModels) {
  std::vector<float> values(4096, 1.0f);
  TransformerWeights w;
  w.output = {TensorType::kF32, values.data(), 4, 1024};
  WeightPreloadOptions options;
  options.max_share_of_memory = 1e-12;
  const WeightPreloadReport skipped = preload_weights(w, options);
  EXPECT_FALSE(skipped.preloaded);
  EXPECT_NE(skipped.skip_reason.find("exceed"), std::string::npos) << skipped.skip_reason;
  const WeightPreloadReport none = preload_weights(TransformerWeights{}, WeightPreloadOptions{});
  EXPECT_FALSE(none.preloaded);
  EXPECT_EQ(none.bytes, 0u);
  EXPECT_TRUE(none.skip_reason.empty());
  options.max_share_of_memory = 0.9;
  const WeightPreloadReport small = preload_weights(w, options);
  EXPECT_TRUE(small.preloaded);
  EXPECT_GE(small.bytes, values.size() * sizeof(float));
}

// The weight quantizers against the (ggml-exact) dequantizers: any misplaced bit, scale or level
// would show as an error of many steps. Blocks of varied ranges, signs and a zero block.
TEST(WeightQuantizers, DequantizeBackWithinAboutHalfAStep) {
  std::mt19937 rng(5);
  std::vector<float> x(4 * kSuperBlock);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t block = i / kSuperBlock;
    const float spread = block == 0 ? 1.0f : block == 1 ? 0.01f : block == 2 ? 0.0f : 40.0f;
    const float shift = block == 3 ? 25.0f : 0.0f;  // a block of positive values only
    x[i] = shift + spread * std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  }
  x[7] = -3.0f;  // a spike in the first sub-block
  // Bound per value: a fraction of its group's ideal step (half a step for the uniform types; half
  // the widest gap of IQ4's level table, 24 levels) plus 1 % of its super-block's range (scales are
  // multiples of a super-block unit, rounded up).
  struct Case {
    TensorType type;
    int group;  // values sharing a step
    double steps;
  };
  for (const Case c : {Case{TensorType::kQ4_K, 32, 0.55}, Case{TensorType::kQ5_K, 32, 0.55},
                       Case{TensorType::kQ6_K, 16, 0.55}, Case{TensorType::kIQ4_XS, 32, 12.5}}) {
    SCOPED_TRACE(tensor_type_name(c.type));
    ASSERT_TRUE(can_quantize_weights(c.type));
    std::vector<std::byte> blocks(tensor_row_bytes(c.type, static_cast<int64_t>(x.size())));
    quantize_weight_row(c.type, x, blocks.data());
    std::vector<float> back(x.size());
    dequantize_blocks(c.type, blocks.data(), back);
    double sq_err = 0, sq = 0;
    for (size_t g = 0; g < x.size(); g += static_cast<size_t>(c.group)) {
      const auto first = x.begin() + static_cast<ptrdiff_t>(g);
      const auto [lo, hi] = std::minmax_element(first, first + c.group);
      const double amax = std::max(std::fabs(*lo), std::fabs(*hi));
      const double step = c.type == TensorType::kQ4_K   ? (std::max(0.0f, *hi) - std::min(0.0f, *lo)) / 15
                          : c.type == TensorType::kQ5_K ? (std::max(0.0f, *hi) - std::min(0.0f, *lo)) / 31
                          : c.type == TensorType::kQ6_K ? amax / 31
                                                        : amax / 113;
      const auto sb = x.begin() + static_cast<ptrdiff_t>(g / kSuperBlock * kSuperBlock);
      const auto [sb_lo, sb_hi] = std::minmax_element(sb, sb + kSuperBlock);
      const double sb_range = std::max(0.0f, *sb_hi) - std::min(0.0f, *sb_lo);
      for (size_t i = g; i < g + static_cast<size_t>(c.group); ++i) {
        EXPECT_LE(std::fabs(back[i] - x[i]), c.steps * step + 0.01 * sb_range + 1e-6) << "value " << i;
        sq_err += (back[i] - x[i]) * (back[i] - x[i]);
        sq += x[i] * x[i];
      }
    }
    EXPECT_LT(std::sqrt(sq_err / sq), c.type == TensorType::kIQ4_XS ? 0.1 : 0.05);
  }
  std::vector<float> ragged(300);
  std::vector<std::byte> out(1024);
  EXPECT_THROW(quantize_weight_row(TensorType::kQ4_K, ragged, out.data()), UsageError);
  EXPECT_THROW(quantize_weight_row(TensorType::kQ8_0, x, out.data()), UsageError);
  EXPECT_FALSE(can_quantize_weights(TensorType::kQ3_K));
}

// The role of a tensor of a llama-style file, by name.
WeightMix::Role role_of(const std::string& name, bool tied) {
  using Role = WeightMix::Role;
  if (name == "token_embd.weight") return tied ? Role::kOutput : Role::kEmbedding;
  if (name == "output.weight") return Role::kOutput;
  if (name.find("attn_q.") != std::string::npos) return Role::kAttnQ;
  if (name.find("attn_k.") != std::string::npos) return Role::kAttnK;
  if (name.find("attn_v.") != std::string::npos) return Role::kAttnV;
  if (name.find("attn_output.") != std::string::npos) return Role::kAttnOutput;
  if (name.find("ffn_down") != std::string::npos) return Role::kFfnDown;
  return Role::kFfnGateUp;
}

// The mixes' rules give every matrix of llama-quantize's own files the type it has there.
TEST(WeightMix, GivesEveryMatrixTheTypeLlamaQuantizeGaveIt) {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  const std::filesystem::path dir = std::filesystem::path(env ? env : "../shared") / "models/gguf";
  if (!std::filesystem::exists(dir / "small-llama.q4_k_m.gguf")) GTEST_SKIP() << dir << " lacks the small models";
  const std::pair<const char*, const char*> files[] = {
      {"small-llama.q4_k_m.gguf", "Q4_K_M"}, {"small-llama.q5_k_m.gguf", "Q5_K_M"}, {"small-llama.q6_k.gguf", "Q6_K"},
      {"small-llama.iq4_xs.gguf", "IQ4_XS"}, {"small-qwen3.q4_k_m.gguf", "Q4_K_M"}, {"small-llama.q8_0.gguf", "Q8_0"},
  };
  for (const auto& [file, mix_name] : files) {
    SCOPED_TRACE(file);
    const GgufFile f((dir / file).string());
    const WeightMix mix = WeightMix::parse(mix_name);
    const std::string arch = std::string(f.find("general.architecture")->as_string("general.architecture"));
    const int layers = static_cast<int>(f.find(arch + ".block_count")->as_int("block_count"));
    const int gqa = static_cast<int>(f.find(arch + ".attention.head_count")->as_int("heads") /
                                     f.find(arch + ".attention.head_count_kv")->as_int("kv heads"));
    bool tied = true;
    for (const GgufTensor& t : f.tensors()) tied = tied && t.name != "output.weight";
    int checked = 0;
    for (const GgufTensor& t : f.tensors()) {
      if (t.ne.size() < 2) continue;  // norms stay F32
      int layer = 0;
      std::sscanf(t.name.c_str(), "blk.%d.", &layer);
      EXPECT_EQ(tensor_type_name(mix.type_of(role_of(t.name, tied), layer, layers, gqa)), tensor_type_name(t.type))
          << t.name;
      ++checked;
    }
    EXPECT_GE(checked, 8);
    EXPECT_EQ(f.find("general.file_type")->as_int("file_type"), mix.file_type());
  }
  EXPECT_THROW(WeightMix::parse("Q3_K_M"), ConfigError);
  EXPECT_EQ(WeightMix::parse("q4_k_m").name(), "Q4_K_M");
}

// A random-weight file in a mix: the same types as llama-quantize's file of that shape, and it
// runs, its logits close to the F32 file's.
TEST(WeightMix, RandomFilesInAMixLoadAndRunCloseToF32) {
  RandomModelShape shape;  // small-llama's shape
  shape.name = "small";
  shape.dim = 256, shape.layers = 2, shape.heads = 4, shape.kv_heads = 1, shape.ffn = 768, shape.vocab = 512;
  shape.context = 256, shape.tied_embeddings = false;
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string f32 = (dir / fmt::format("pagedkv-mix-f32-{}.gguf", getpid())).string();
  write_random_gguf(shape, WeightMix::parse("F32"), 3, f32);
  for (const char* name : {"Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_XS"}) {
    SCOPED_TRACE(name);
    const std::string path = (dir / fmt::format("pagedkv-mix-{}-{}.gguf", name, getpid())).string();
    write_random_gguf(shape, WeightMix::parse(name), 3, path);
    {
      const GgufFile f(path);
      EXPECT_EQ(f.find("general.file_type")->as_int("file_type"), WeightMix::parse(name).file_type());
      for (const GgufTensor& t : f.tensors()) {
        if (t.ne.size() < 2) continue;
        int layer = 0;
        std::sscanf(t.name.c_str(), "blk.%d.", &layer);
        EXPECT_EQ(t.type, WeightMix::parse(name).type_of(role_of(t.name, false), layer, 2, 4)) << t.name;
      }
      // Every matrix dequantizes close to the F32 file's values.
      const GgufFile ref(f32);
      for (const GgufTensor& t : f.tensors()) {
        if (t.ne.size() < 2) continue;
        const GgufTensor* r = nullptr;
        for (const GgufTensor& u : ref.tensors())
          if (u.name == t.name) r = &u;
        ASSERT_NE(r, nullptr);
        std::vector<float> row(static_cast<size_t>(t.ne[0]));
        const float* want = reinterpret_cast<const float*>(r->data);
        double err = 0, norm = 0;
        for (int64_t k = 0; k < t.rows(); ++k) {
          dequantize_blocks(t.type, t.data + static_cast<size_t>(k) * tensor_row_bytes(t.type, t.ne[0]), row);
          for (size_t j = 0; j < row.size(); ++j) {
            const double w = want[static_cast<size_t>(k) * row.size() + j];
            err += (row[j] - w) * (row[j] - w);
            norm += w * w;
          }
        }
        EXPECT_LT(std::sqrt(err / norm), 0.12) << t.name;
      }
    }
    std::filesystem::remove(path);
  }
  std::filesystem::remove(f32);
}

}  // namespace
}  // namespace pagedkv
