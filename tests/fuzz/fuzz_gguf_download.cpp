// libFuzzer target: the GGUF files users download, damaged. The shared small-* models (K-quant,
// IQ4 and legacy mixes; llama, qwen3, phi3 and qwen3moe; tok512 vocabulary) are read once, and
// each input picks one and describes edits to it: byte patches aimed at the header (metadata
// counts and strings, tensor names, types, shapes, offsets) or at the tensor data (quantized
// scales and codes), and an optional truncation. The damaged file must be refused with a
// FormatError, or its model and its tokenizer load, a prompt and a decode step run, and the
// logits and sampled tokens fit the vocabulary. Anything else (another exception, a crash, a
// sanitizer report) is a bug. Where ../shared is absent (PAGEDKV_SHARED_DIR overrides), the
// target has no files and checks nothing.
//
// Input layout: byte 0 picks the file; byte 1 sets the mode (a truncation when its low three
// bits are zero); then records of [region, offset (3 bytes), length 1..8, bytes], region's low
// bit choosing the header (before the data section) or the data section.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/forward_batch.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/sampler.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/storage/kv_arena.h"

namespace {

using pagedkv::fuzz::check;

struct SourceFile {
  std::vector<std::byte> bytes;
  size_t data_start = 0;  // where the tensor data section begins
};

// The small-* files up to 2.5 MB: every quantized mix of every architecture (the F32 and F16
// copies add no format the other target lacks and cost a forward pass several times larger).
std::vector<SourceFile> load_sources() {
  namespace fs = std::filesystem;
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  const fs::path dir = fs::path(env ? env : "../shared") / "models" / "gguf";
  std::vector<fs::path> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("small-") && name.ends_with(".gguf") && entry.file_size(ec) <= 2'500'000)
      paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());  // the same index names the same file in every run
  std::vector<SourceFile> sources;
  for (const fs::path& p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SourceFile s;
    s.bytes.resize(raw.size());
    std::transform(raw.begin(), raw.end(), s.bytes.begin(), [](char c) { return static_cast<std::byte>(c); });
    const pagedkv::GgufFile pristine(s.bytes, p.filename().string());
    s.data_start = pristine.tensors().empty() ? s.bytes.size()
                                              : static_cast<size_t>(pristine.tensors().front().data - s.bytes.data()) -
                                                    pristine.tensors().front().offset;
    sources.push_back(std::move(s));
  }
  return sources;
}

std::vector<std::byte> damaged_copy(const SourceFile& source, pagedkv::fuzz::ByteReader& r) {
  std::vector<std::byte> bytes = source.bytes;
  const uint8_t mode = r.next();
  while (!r.empty()) {
    const bool header = (r.next() & 1) != 0;
    const uint32_t at = r.next() | (r.next() << 8) | (static_cast<uint32_t>(r.next()) << 16);
    const size_t length = 1 + r.next() % 8;
    const size_t begin = header ? 0 : source.data_start;
    const size_t span = (header ? source.data_start : bytes.size()) - begin;
    if (span == 0) continue;
    const size_t offset = begin + at % span;
    for (size_t i = 0; i < length && offset + i < bytes.size(); ++i)
      bytes[offset + i] = static_cast<std::byte>(r.next());
  }
  if ((mode & 7) == 0) bytes.resize(bytes.size() * (mode >> 3) / 32);  // cut at 0..97 % of the file
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<SourceFile> sources = (pagedkv::set_kernel_threads(1), load_sources());
  if (sources.empty() || size == 0) return 0;
  pagedkv::fuzz::ByteReader r{data, size};
  const SourceFile& source = sources[r.next() % sources.size()];
  const std::vector<std::byte> bytes = damaged_copy(source, r);
  try {
    auto file = std::make_unique<pagedkv::GgufFile>(bytes, "damaged.gguf");
    const std::unique_ptr<pagedkv::TextTokenizer> tokenizer = pagedkv::make_gguf_tokenizer(*file);
    const int vocab = tokenizer->vocab_size();
    std::vector<pagedkv::TokenId> prompt = tokenizer->encode("Once upon a time", true);
    const pagedkv::GgufModel model(std::move(file));
    pagedkv::ModelRunner runner(model);
    const auto& c = runner.config();
    if (c.vocab_size != vocab) return 0;  // a mismatch the server refuses before running anything
    for (pagedkv::TokenId t : prompt) check(t >= 0 && t < vocab);
    if (prompt.empty()) prompt.push_back(0);
    constexpr int kBlockSize = 16;
    const int blocks_needed = static_cast<int>(prompt.size()) / kBlockSize + 2;
    pagedkv::KVArena arena(runner.kv_cache_spec(kBlockSize), c.kv_arena_layers(), blocks_needed + 1);
    std::vector<int32_t> blocks(static_cast<size_t>(blocks_needed));
    for (int i = 0; i < blocks_needed; ++i) blocks[static_cast<size_t>(i)] = i + 1;
    pagedkv::ForwardBatchBuilder batch(kBlockSize);
    batch.add_request(prompt, 0, blocks, true);
    pagedkv::Logits logits = runner.forward(batch.batch(), arena);
    check(logits.num_rows == 1 && logits.vocab_size == vocab);
    const pagedkv::TokenId next = pagedkv::Sampler::argmax(logits.row(0));
    check(next >= 0 && next < vocab);
    batch.clear();
    batch.add_request(std::vector<pagedkv::TokenId>{next}, static_cast<int>(prompt.size()), blocks, true);
    logits = runner.forward(batch.batch(), arena);
    check(logits.num_rows == 1 && logits.vocab_size == vocab);
    pagedkv::SamplingParams params;
    params.temperature = 1.0f;
    pagedkv::Sampler sampler(vocab, params);
    const pagedkv::TokenId sampled = sampler.sample(logits.row(0));
    check(sampled >= 0 && sampled < vocab);
    (void)tokenizer->decode_piece(next, sampled);
  } catch (const pagedkv::FormatError&) {
  }
  return 0;
}
