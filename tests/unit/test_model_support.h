// Shared helpers of the model tests (the goldens come from golden_support.h): temporary
// directories, and a minimal greedy generation loop that drives ModelRunner directly (no block
// manager: a test-local allocator hands each sequence its own blocks, in a scrambled order).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "golden_support.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/sampler.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv::testing {

namespace fs = std::filesystem;

// Sets the kernels' and matmuls' thread count for one scope. The model tests run single-threaded
// by default: ctest runs many test programs at once on few cores, and OpenMP teams that spin at
// barriers on an oversubscribed machine turn a 0.3 ms step into tens of milliseconds. One test
// per suite opts into two threads to cover the parallel paths.
class ScopedKernelThreads {
 public:
  explicit ScopedKernelThreads(int n) : previous_(kernel_threads()) { set_kernel_threads(n); }
  ~ScopedKernelThreads() { set_kernel_threads(previous_); }

 private:
  int previous_;
};

// A temporary directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("pagedkv_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  fs::path path_;
};

// One sequence of a generation with run.c semantics: forwards at positions 0..steps-1, prompt
// tokens forced, then argmax (or `sampler` when set); stops after choosing BOS (kept in ids,
// like the goldens).
struct Sequence {
  std::vector<TokenId> prompt;  // BOS first
  int steps = 0;
  std::optional<Sampler> sampler;
  std::vector<TokenId> ids;  // prompt, then every chosen token
  int computed = 0;  // positions whose K/V are in the cache
  bool done = false;
  std::vector<int32_t> blocks;  // this sequence's block table row
};

// Hands out block ids 1..num_blocks-1 in a fixed pseudo-random order, so consecutive blocks of
// a sequence are scattered over the arena and interleaved with other sequences' blocks.
class ScrambledBlocks {
 public:
  explicit ScrambledBlocks(int num_blocks, uint32_t seed = 12345) : free_(static_cast<size_t>(num_blocks - 1)) {
    std::iota(free_.begin(), free_.end(), 1);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(seed));
  }
  int32_t take() {
    if (free_.empty()) throw std::runtime_error("test arena out of blocks");
    const int32_t b = free_.back();
    free_.pop_back();
    return b;
  }

 private:
  std::vector<int32_t> free_;
};

// Runs the sequences to completion, all active ones in one flattened batch per step, each
// contributing up to `max_chunk` tokens per step (prefill in chunks; decode is 1 token).
// Returns the number of forward passes.
inline int generate(ModelRunner& runner, KVArena& arena, std::vector<Sequence>& seqs, int max_chunk) {
  const int bs = arena.spec().block_size;
  ScrambledBlocks allocator(arena.num_blocks());
  for (auto& s : seqs) {
    s.ids = s.prompt;
    s.computed = 0;
    s.done = s.steps <= 0;
    s.blocks.clear();
  }
  int forwards = 0;
  for (;;) {
    std::vector<TokenId> tokens;
    std::vector<int32_t> positions, query_start{0}, context_lens, logits_rows, tables;
    std::vector<int64_t> slots;
    std::vector<Sequence*> active, sampling;
    for (auto& s : seqs) {
      if (s.done) continue;
      const int end = std::min({static_cast<int>(s.ids.size()), s.computed + max_chunk, s.steps});
      for (int p = s.computed; p < end; ++p) {
        if (p / bs >= static_cast<int>(s.blocks.size())) s.blocks.push_back(allocator.take());
        tokens.push_back(s.ids[static_cast<size_t>(p)]);
        positions.push_back(p);
        slots.push_back(static_cast<int64_t>(s.blocks[static_cast<size_t>(p / bs)]) * bs + p % bs);
      }
      query_start.push_back(static_cast<int32_t>(tokens.size()));
      context_lens.push_back(end);
      // The token after position end-1 is chosen, not forced, once the prompt is consumed.
      if (end - 1 >= static_cast<int>(s.prompt.size()) - 1) {
        logits_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
        sampling.push_back(&s);
      }
      active.push_back(&s);
      s.computed = end;
    }
    if (active.empty()) return forwards;
    size_t stride = 1;
    for (auto* s : active) stride = std::max(stride, s->blocks.size());
    tables.assign(active.size() * stride, 0);
    for (size_t i = 0; i < active.size(); ++i)
      std::copy(active[i]->blocks.begin(), active[i]->blocks.end(),
                tables.begin() + static_cast<std::ptrdiff_t>(i * stride));

    ForwardBatch batch;
    batch.token_ids = tokens;
    batch.positions = positions;
    batch.slot_mapping = slots;
    batch.attention.num_requests = static_cast<int>(active.size());
    batch.attention.query_start = query_start.data();
    batch.attention.context_lens = context_lens.data();
    batch.attention.block_tables = tables.data();
    batch.attention.block_table_stride = static_cast<int>(stride);
    batch.logits_rows = logits_rows;
    const Logits logits = runner.forward(batch, arena);
    ++forwards;

    for (size_t r = 0; r < sampling.size(); ++r) {
      Sequence& s = *sampling[r];
      const auto row = logits.row(static_cast<int>(r));
      const TokenId next = s.sampler ? s.sampler->sample(row) : Sampler::argmax(row);
      s.ids.push_back(next);
      if (next == 1) s.done = true;  // run.c stops when it chooses BOS
    }
    for (auto* s : active)
      if (s->computed >= s->steps) s->done = true;
  }
}

// The naive forwards' weights (test_model_gguf_gemma3.cpp, test_model_gguf_longrope.cpp): n values
// offset + N(0, scale).
inline std::vector<float> normal_values(std::mt19937& rng, size_t n, float scale, float offset = 0) {
  std::normal_distribution<float> d(0, scale);
  std::vector<float> m(n);
  for (float& x : m) x = offset + d(rng);
  return m;
}

// The naive forwards' products: rows [first, first + rows) of the row-major m (cols = x.size())
// times x, each summed in double.
inline std::vector<float> naive_matvec(const std::vector<float>& m, const std::vector<float>& x, size_t first,
                                       size_t rows) {
  std::vector<float> out(rows, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (size_t c = 0; c < x.size(); ++c) acc += static_cast<double>(m[(first + r) * x.size() + c]) * x[c];
    out[r] = static_cast<float>(acc);
  }
  return out;
}

}  // namespace pagedkv::testing
