#include "pagedkv/model/quant/quantized_matrix.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/storage/float_convert.h"
#include "block_dot.h"
#include "quantized_kernels.h"

namespace pagedkv {

namespace quant_detail {
namespace {

// The portable twin: one dot product per (row, token), summed left to right, the reference the
// SIMD builds are tested against.
float dot_f16(const uint16_t* w, const float* x, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += f16_to_f32(w[i]) * x[i];
  return acc;
}

float dot_bf16(const uint16_t* w, const float* x, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += bf16_to_f32(w[i]) * x[i];
  return acc;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int blocks) {
  float acc = 0.0f;
  for (int b = 0; b < blocks; ++b) {
    int sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) sum += w[b].q[j] * x[b].q[j];
    acc += static_cast<float>(sum) * (f16_to_f32(w[b].d) * f16_to_f32(x[b].d));
  }
  return acc;
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int blocks) {
  float acc = 0.0f;
  for (int b = 0; b < blocks; ++b) {
    int sum = 0;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      sum += ((w[b].q[j] & 0x0F) - 8) * x[b].q[j];
      sum += ((w[b].q[j] >> 4) - 8) * x[b].q[j + kQuantBlock / 2];
    }
    acc += static_cast<float>(sum) * (f16_to_f32(w[b].d) * f16_to_f32(x[b].d));
  }
  return acc;
}

size_t scalar_prepared_bytes(int cols) { return static_cast<size_t>(cols / kQuantBlock) * sizeof(BlockQ8_0); }

void scalar_prepare(const float* x, int cols, std::byte* out) {
  quantize_row_q8_0({x, static_cast<size_t>(cols)}, reinterpret_cast<BlockQ8_0*>(out));
}

void scalar_multiply_rows(const WeightRows& w, int r0, int r1, const Activations& x, float* y, size_t y_stride) {
  const int blocks = w.cols / kQuantBlock;
  for (int r = r0; r < r1; ++r) {
    const std::byte* wr = w.base + static_cast<size_t>(r) * w.row_bytes;
    for (int t = 0; t < x.num_tokens; ++t) {
      const std::byte* xt = x.data + static_cast<size_t>(t) * x.stride;
      float v = 0.0f;
      switch (w.type) {
        case TensorType::kF16:
          v = dot_f16(reinterpret_cast<const uint16_t*>(wr), reinterpret_cast<const float*>(xt), w.cols);
          break;
        case TensorType::kBF16:
          v = dot_bf16(reinterpret_cast<const uint16_t*>(wr), reinterpret_cast<const float*>(xt), w.cols);
          break;
        case TensorType::kQ8_0:
          v = dot_q8_0(reinterpret_cast<const BlockQ8_0*>(wr), reinterpret_cast<const BlockQ8_0*>(xt), blocks);
          break;
        default:
          v = dot_q4_0(reinterpret_cast<const BlockQ4_0*>(wr), reinterpret_cast<const BlockQ8_0*>(xt), blocks);
          break;
      }
      y[static_cast<size_t>(t) * y_stride + static_cast<size_t>(r)] = v;
    }
  }
}

// The AVX-512 build multiplies Q8_0 blocks with VNNI's vpdpbusd; CPUs with AVX-512 but no VNNI
// (Skylake-X) run the AVX2 builds instead, which read panels for F16, BF16, Q4_0 and the
// super-block types (Q8_0 rows they read as the file stores them).
PanelBuild panel_build(TensorType type, KernelIsa requested) {
  const KernelIsa resolved = resolve_isa(requested);
  if (resolved == KernelIsa::kAvx512 && cpu_has_avx512_vnni()) return PanelBuild::kAvx512;
  return has_avx2(resolved) && has_avx2_panels(type) ? PanelBuild::kAvx2 : PanelBuild::kNone;
}

const RowsKernel& rows_kernel_for(KernelIsa requested) {
  return has_avx2(resolve_isa(requested)) ? avx2_rows_kernel() : scalar_rows_kernel();
}

}  // namespace

const RowsKernel& scalar_rows_kernel() {
  static const RowsKernel k{scalar_prepared_bytes, scalar_prepare, scalar_multiply_rows};
  return k;
}

}  // namespace quant_detail

Bf16Products bf16_products(KernelIsa isa) {
  static const bool pairs = [] {
    if (!cpu_has_avx512_bf16() || !cpu_has_avx512_vnni()) return false;  // (the AVX-512 build needs VNNI)
    const char* forced = std::getenv("PAGEDKV_BF16_PAIRS");
    if (forced != nullptr && (std::string_view(forced) == "0" || std::string_view(forced) == "1"))
      return std::string_view(forced) == "1";
    return cpu_is_amd();
  }();
  return pairs && resolve_isa(isa) == KernelIsa::kAvx512 ? Bf16Products::kPairs : Bf16Products::kWidened;
}

// The repacked copy of the weights, on transparent huge pages where it is large enough (fewer TLB
// misses on a stream of gigabytes, as the KV arena asks for).
struct QuantizedMatrix::Panels {
  quant_detail::PanelLayout layout;
  std::unique_ptr<std::byte, decltype(&std::free)> data{nullptr, &std::free};
};

QuantizedMatrix::QuantizedMatrix(const WeightTensor& w) : w_(w) {
  if (w.type != TensorType::kF16 && w.type != TensorType::kBF16 && w.type != TensorType::kQ8_0 &&
      w.type != TensorType::kQ4_0 && !quant_detail::is_block_format(w.type))
    throw UsageError(fmt::format("QuantizedMatrix: {} weights are not supported", tensor_type_name(w.type)));
  if (w.rows <= 0 || w.cols <= 0 || w.rows > INT32_MAX || w.cols > INT32_MAX || w.data == nullptr)
    throw UsageError(fmt::format("QuantizedMatrix: bad shape {} x {}", w.rows, w.cols));
  const auto traits = tensor_type_traits(static_cast<uint32_t>(w.type));
  if (w.cols % traits->block_elements != 0)
    throw UsageError(fmt::format("QuantizedMatrix: {} rows of {} values are not whole blocks of {}",
                                 tensor_type_name(w.type), w.cols, traits->block_elements));
  const bool panelled = !quant_detail::is_block_format(w.type) || quant_detail::is_panelled_block_format(w.type);
  if (!panelled || quant_detail::panel_build(w.type, KernelIsa::kAuto) == quant_detail::PanelBuild::kNone) return;
  // The AVX-512 build (and AVX2's for some types) reads a row-interleaved copy, made once here
  // (see quantized_panels.h).
  auto panels = std::make_shared<Panels>();
  panels->layout = quant_detail::panel_layout(w.type, rows(), cols());
  const quant_detail::PanelLayout& l = panels->layout;
  // Large copies start on a huge-page boundary; the size is not rounded up (a partial last huge
  // page stays on small pages), so a model's hundred-odd matrices waste no huge pages.
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t bytes = static_cast<size_t>(l.panels) * l.panel_bytes;
  void* data = nullptr;
  if (posix_memalign(&data, bytes >= kHugePage ? kHugePage : 64, bytes) != 0)
    throw Error(fmt::format("QuantizedMatrix: cannot allocate {} bytes for the repacked weights", bytes));
  panels->data.reset(static_cast<std::byte*>(data));
  if (bytes >= kHugePage) (void)madvise(data, bytes, MADV_HUGEPAGE);
  constexpr int kPanelsPerTask = 8;
  const int tasks = (l.panels + kPanelsPerTask - 1) / kPanelsPerTask;
#pragma omp parallel for schedule(static) if (tasks > 1 && bytes >= (size_t{1} << 20)) num_threads(kernel_threads())
  for (int i = 0; i < tasks; ++i)
    quant_detail::repack_panels(w, l, i * kPanelsPerTask, std::min(l.panels, (i + 1) * kPanelsPerTask),
                                panels->data.get());
  panels_ = std::move(panels);
}

void QuantizedMatrix::multiply(const float* x, size_t x_stride, int num_tokens, float* y, size_t y_stride,
                               KernelIsa isa) const {
  if (num_tokens <= 0) return;
  thread_local Prepared prepared;
  prepare(x, x_stride, num_tokens, prepared, isa);
  multiply(prepared, y, y_stride);
}

namespace {

// A matrix of this many bytes or more is split over the threads even when its multiply-adds alone
// would not pay for waking them: one decode token is bound by memory bandwidth, which one core does
// not saturate. Below a megabyte this matters too: Llama-3.2-1B's k and v (512 x 2048, 0.6-0.9 MB
// in Q4_K / Q6_K) on one thread took ~90 us each, back to back, long enough for the idle thread to
// stop spinning (the CLI's spin lasts ~85 us on a Zen 3) and to wake late for the next call.
constexpr double kMinParallelWeightBytes = 256.0 * 1024;

// Calls of at most this many tokens (decode steps) split their rows into kChunksPerThread chunks
// per thread, which the threads claim in turn, rather than one contiguous share each: such a call
// is short (0.1-1 ms) and bound by memory, so a thread that starts late (woken from sleep, or
// descheduled on a shared machine) would otherwise hold the whole team at the closing barrier,
// and the thread waiting there may fall asleep in turn.
constexpr int kBalancedMaxTokens = 8;
constexpr int kChunksPerThread = 8;
// Batched decode steps (up to this many tokens) take kBatchChunksPerThread chunks per thread: their
// calls are compute-bound and equal halves still finish apart (on Zen 4, 2 threads, a 32-token Q5_K_M
// step: the first thread waited at the closing barriers for 7-8 % of the step, 2-3 % with 4 chunks
// a thread). Prompts keep one share per thread (the AVX-512 build blocks over a share's rows).
constexpr int kBatchMaxTokens = 64;
constexpr int kBatchChunksPerThread = 4;

// How many chunks the `groups` row groups of a call of `num_tokens` tokens over `rows` x `cols`
// weights of `bytes` bytes are split into (1: the calling thread alone).
int chunk_count(int groups, int num_tokens, int rows, int cols, size_t bytes) {
  const double macs = static_cast<double>(num_tokens) * rows * cols;
  const bool parallel = macs >= kMinParallelMultiplyAdds || static_cast<double>(bytes) >= kMinParallelWeightBytes;
  if (!parallel || groups <= 1) return 1;
  const int threads = kernel_threads();
  const int per_thread = num_tokens <= kBalancedMaxTokens ? kChunksPerThread
                         : num_tokens <= kBatchMaxTokens  ? kBatchChunksPerThread
                                                          : 1;
  return std::min(groups, per_thread * threads);
}

// The row groups calls are cut into: 4 panels of 16 rows in the panel builds (the AVX-512 tiles for
// few tokens span 4 panels), 16 rows in the others.
constexpr int kGroupPanels = 4;
constexpr int kGroupRows = 16;

// The first of `groups` groups that chunk i of `chunks` takes.
int chunk_begin(int groups, int chunks, int i) { return static_cast<int>(static_cast<int64_t>(groups) * i / chunks); }

// f(g0, g1) for every chunk's groups [g0, g1) of `chunks` chunks, which the threads claim in turn.
template <class F>
void for_each_chunk(int groups, int chunks, F&& f) {
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1) num_threads(std::min(chunks, kernel_threads()))
  for (int i = 0; i < chunks; ++i) f(chunk_begin(groups, chunks, i), chunk_begin(groups, chunks, i + 1));
}

// The block formats without a panel layout, and every block format in the builds without panels,
// take one block_dot per row and token.
bool runs_blocks(TensorType type, bool panels) {
  return quant_detail::is_block_format(type) && !(panels && quant_detail::is_panelled_block_format(type));
}

// Only touched after the run-time check: its translation unit is compiled for AVX-512 (or AVX2).
const quant_detail::PanelsKernel& panels_kernel_for(TensorType type, quant_detail::PanelBuild build) {
  if (type == TensorType::kBF16 && build == quant_detail::PanelBuild::kAvx512 &&
      bf16_products(KernelIsa::kAvx512) == Bf16Products::kPairs)
    return quant_detail::avx512_bf16_pair_panels_kernel();
  if (build == quant_detail::PanelBuild::kAvx2) {
    if (type == TensorType::kF16 || type == TensorType::kBF16) return quant_detail::avx2_float_panels_kernel();
    return type == TensorType::kQ4_0 ? quant_detail::avx2_q4_0_panels_kernel()
                                     : quant_detail::avx2_k_quant_panels_kernel();
  }
  if (quant_detail::is_panelled_low_bit(type)) return quant_detail::avx512_low_bit_panels_kernel();
  return quant_detail::is_panelled_k_quant(type) ? quant_detail::avx512_k_quant_panels_kernel()
                                                 : quant_detail::avx512_panels_kernel();
}

}  // namespace

void QuantizedMatrix::prepare(const float* x, size_t x_stride, int num_tokens, Prepared& out, KernelIsa isa) const {
  out.type = w_.type;
  out.cols = cols();
  out.num_tokens = num_tokens;
  out.isa = isa;
  out.x = x;
  out.x_stride = x_stride;
  out.stride = 0;
  if (num_tokens <= 0) return;
  const int cols = this->cols();
  const quant_detail::PanelBuild build = quant_detail::panel_build(w_.type, isa);
  const bool panels = build != quant_detail::PanelBuild::kNone;
  // Block formats: every token's activations quantized once to the type's activation format.
  if (runs_blocks(w_.type, panels)) {
    out.stride = quant_detail::activation_row_bytes(w_.type, cols);
    out.bytes.resize(out.stride * static_cast<size_t>(num_tokens));
    for (int t = 0; t < num_tokens; ++t)
      quant_detail::quantize_activations(w_.type, x + static_cast<size_t>(t) * x_stride, cols,
                                         out.bytes.data() + static_cast<size_t>(t) * out.stride);
    return;
  }
  // Quantized weights multiply Q8_0 activations: quantize every token row once. The AVX-512
  // build reorders f32 activations too.
  if (panels) {
    const quant_detail::PanelsKernel& pk = panels_kernel_for(w_.type, build);
    out.bytes.resize(pk.prepared_bytes(w_.type, cols, num_tokens));
    pk.prepare(w_.type, x, x_stride, num_tokens, cols, out.bytes.data());
  } else if (w_.type == TensorType::kQ8_0 || w_.type == TensorType::kQ4_0) {
    const quant_detail::RowsKernel& k = quant_detail::rows_kernel_for(isa);
    out.stride = k.prepared_bytes(cols);
    out.bytes.resize(out.stride * static_cast<size_t>(num_tokens));
    for (int t = 0; t < num_tokens; ++t)
      k.prepare(x + static_cast<size_t>(t) * x_stride, cols, out.bytes.data() + static_cast<size_t>(t) * out.stride);
  }
}

// One product cut into chunks of row groups: what multiply() runs, and multiply_all() runs several
// of in one parallel region. Exactly one of the three kernels is set.
struct QuantizedMatrix::Work {
  int groups = 0;  // row groups: kGroupPanels panels (the panel builds) or kGroupRows rows
  int chunks = 1;  // chunk_count's split of the groups
  float* y = nullptr;
  size_t y_stride = 0;
  // The panel builds.
  const quant_detail::PanelsKernel* panels_kernel = nullptr;
  quant_detail::WeightPanels panels{};
  // The rows in place: the rows kernel (Q8_0 / Q4_0 without panels, F16 / BF16 in the scalar
  // twin) or the block formats' (one block_dot per row and token).
  const quant_detail::RowsKernel* rows_kernel = nullptr;
  const quant_detail::BlockRowsKernel* block_kernel = nullptr;
  quant_detail::WeightRows rows{};
  int row_count = 0;
  quant_detail::Activations acts{};

  // Row groups [g0, g1), every token.
  void run(int g0, int g1) const {
    if (panels_kernel != nullptr) {
      // A chunk's groups in one call, so that a kernel can block over more rows than one group's.
      panels_kernel->multiply_panels(panels, g0 * kGroupPanels, std::min(panels.layout.panels, g1 * kGroupPanels), acts,
                                     y, y_stride);
    } else if (rows_kernel != nullptr) {
      for (int g = g0; g < g1; ++g)
        rows_kernel->multiply_rows(rows, g * kGroupRows, std::min(row_count, (g + 1) * kGroupRows), acts, y, y_stride);
    } else {
      for (int g = g0; g < g1; ++g)
        block_kernel->multiply_rows(rows.type, rows.base, rows.row_bytes, rows.cols, g * kGroupRows,
                                    std::min(row_count, (g + 1) * kGroupRows), acts.data, acts.stride, acts.num_tokens,
                                    y, y_stride);
    }
  }
};

QuantizedMatrix::Work QuantizedMatrix::plan(const Prepared& x, float* y, size_t y_stride) const {
  if (!reads(x, x.isa)) throw UsageError("QuantizedMatrix: activations prepared for another type or shape");
  Work work;
  work.y = y;
  work.y_stride = y_stride;
  const int num_tokens = x.num_tokens;
  if (num_tokens <= 0) return work;
  const KernelIsa isa = x.isa;
  const quant_detail::PanelBuild build = quant_detail::panel_build(w_.type, isa);
  const bool panels = build != quant_detail::PanelBuild::kNone;
  const int rows = this->rows(), cols = this->cols();
  work.row_count = rows;
  work.rows = {w_.type, static_cast<const std::byte*>(w_.data), tensor_row_bytes(w_.type, cols), cols};
  if (runs_blocks(w_.type, panels)) {
    // The AVX-512 build multiplies bytes with VNNI; without it (or with PAGEDKV_VNNI=0, for
    // comparisons: both give the scalar twin's results bit for bit) the AVX2 build runs.
    const KernelIsa resolved = resolve_isa(isa);
    work.block_kernel = resolved == KernelIsa::kAvx512 && has_avx512_vnni() ? &quant_detail::avx512_block_kernel()
                        : has_avx2(resolved)                                ? &quant_detail::avx2_block_kernel()
                                                                            : &quant_detail::scalar_block_kernel();
    work.acts = {x.bytes.data(), x.stride, num_tokens};
    work.groups = (rows + kGroupRows - 1) / kGroupRows;
    work.chunks = chunk_count(work.groups, num_tokens, rows, cols, bytes());
    return work;
  }
  if (panels &&
      !panels_)  // cannot happen: the default build (kAuto) reads panels whenever a build that may be asked for does
    throw UsageError(
        "QuantizedMatrix: the panel builds need the repacked weights, made only where the default build reads them");
  work.acts =
      panels || w_.type == TensorType::kQ8_0 || w_.type == TensorType::kQ4_0
          ? quant_detail::Activations{x.bytes.data(), x.stride, num_tokens}
          : quant_detail::Activations{reinterpret_cast<const std::byte*>(x.x), x.x_stride * sizeof(float), num_tokens};
  // Groups of rows, each read once from memory for the whole batch, in chunks over the threads
  // (chunk_count).
  const int row_group = panels ? kGroupPanels * quant_detail::kPanelRows : kGroupRows;
  work.groups = (rows + row_group - 1) / row_group;
  work.chunks = chunk_count(work.groups, num_tokens, rows, cols, bytes());
  if (panels) {
    work.panels_kernel = &panels_kernel_for(w_.type, build);
    work.panels = {panels_->layout, panels_->data.get()};
  } else {
    work.rows_kernel = &quant_detail::rows_kernel_for(isa);
  }
  return work;
}

void QuantizedMatrix::multiply(const Prepared& x, float* y, size_t y_stride) const {
  const Work work = plan(x, y, y_stride);
  if (work.groups == 0) return;
  for_each_chunk(work.groups, work.chunks, [&](int g0, int g1) { work.run(g0, g1); });
}

void QuantizedMatrix::multiply_all(std::span<const Product> products) {
  // The calling thread's scratch, named here: inside the parallel region a thread_local name would
  // be each thread's own (empty) copy.
  thread_local std::vector<Work> scratch_works;
  thread_local std::vector<int> scratch_first;
  std::vector<Work>& works = scratch_works;
  std::vector<int>& first_chunk = scratch_first;  // works[i]'s chunks are [first_chunk[i], first_chunk[i + 1])
  works.clear();
  first_chunk.assign(1, 0);
  bool parallel = false;
  for (const Product& p : products) {
    Work work = p.matrix->plan(*p.x, p.y, p.y_stride);
    if (work.groups == 0) continue;
    parallel = parallel || work.chunks > 1;
    first_chunk.push_back(first_chunk.back() + work.chunks);
    works.push_back(work);
  }
  const int total = first_chunk.back();
  if (total == 0) return;
  // Chunk i of all: which product's, and which of its chunks.
  const auto run_chunk = [&works, &first_chunk](int i) {
    const size_t w =
        static_cast<size_t>(std::upper_bound(first_chunk.begin(), first_chunk.end(), i) - first_chunk.begin()) - 1;
    const Work& work = works[w];
    const int c = i - first_chunk[w];
    work.run(chunk_begin(work.groups, work.chunks, c), chunk_begin(work.groups, work.chunks, c + 1));
  };
  // Products that none would split alone stay on the calling thread, as multiply() keeps them.
#pragma omp parallel for schedule(dynamic, 1) if (parallel) num_threads(std::min(total, kernel_threads()))
  for (int i = 0; i < total; ++i) run_chunk(i);
}

}  // namespace pagedkv
