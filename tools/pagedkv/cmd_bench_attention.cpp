// pagedkv bench attention: decode attention (one query token per request) for Llama-like shapes
// (by default 32 query heads, 8 KV heads, head dim 128; --heads and --head-dim change them),
// judged against the floor of a memory-bound kernel:
//   1. the machine's read bandwidth, measured in this run with the same thread count;
//   2. paged decode over a shuffled block table (block size 16): achieved GB/s of K/V read and
//      its fraction of (1);
//   3. the same kernel over a contiguous cache (one block per request holding its whole
//      context), so paged_over_contiguous = paged time / contiguous time is what paging costs.
// Each call reads one layer of an arena with enough layers that a pass over them is at least
// --rotate-mib, as a model's layers would be, so small contexts are not served from the L3.
// With --shared-prefix N the requests' block tables start with the same N / block size blocks (a
// cached system prompt, each request with a private suffix after it), and (3) is instead the same
// paged batch with cascade attention off: cascade/off = time with cascade on / time with it off.
// --no-cascade turns cascade attention off in (2).
// The three are measured in interleaved rounds (bandwidth, paged, contiguous; then the reverse),
// and the ratios are medians of per-round ratios: on a shared machine the bandwidth moves by up to
// 2x between seconds, so only measurements taken side by side compare.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "run_statistics.h"
#include "pagedkv/core/cpu_clock.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/kernels/memory_bandwidth.h"
#include "pagedkv/kernels/paged_attention.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv::cli {
namespace {

struct BenchOptions {
  AttentionShape shape{32, 8, 128};  // every case's heads; the scale is set from head_dim
  std::string heads = "32/8";  // --heads Q/KV, parsed into shape
  std::vector<std::string> dtypes{"fp32", "fp16"};
  std::vector<int> contexts{1024, 4096, 32768, 65536};
  std::vector<int> batches{1, 8, 32};
  int block_size = 16;
  int threads = 0;  // 0: the kernel default
  double max_gib = 2.0;  // skip cases whose K/V per layer exceeds this
  double rotate_mib = 256;  // rotate layers until one pass reads this much: 8x this machine's L3
  double bandwidth_mib = 1024;
  double seconds = 0.25;  // measuring time per variant of a case
  int rounds = 7;  // interleaved rounds; times and ratios are medians over them
  std::string isa = "auto";
  std::string clock = "wall";  // or "cpu": the one kernel thread's CPU time (needs --threads 1)
  int shared_prefix = 0;  // tokens (whole blocks) every request's block table shares
  bool no_cascade = false;  // cascade attention off in the paged run
  bool json = false;
};

struct Measured {
  double ms = 0;  // median time per call
  double gbps = 0;
};

struct CaseResult {
  std::string dtype;
  int context = 0, batch = 0;
  double kv_bytes = 0;
  int layers = 0;
  std::optional<std::string> skipped;
  Measured paged, contiguous;  // with --shared-prefix, `contiguous` is paged with cascade off
  double read_bandwidth = 0;  // median of the probes taken between this case's rounds
  double fraction_of_bandwidth = 0;  // median over rounds of paged GB/s / that round's bandwidth
  double paged_over_contiguous = 0;  // median over rounds of paged time / contiguous time
};

// Bytes of one token's K (or V) for all KV heads: the elements and, for int8/fp8, their scales
// (half of KVCacheSpec's K plus V).
size_t token_bytes(const AttentionShape& h, DType dtype) {
  KVCacheSpec spec;
  spec.num_kv_heads = h.num_kv_heads;
  spec.head_dim = h.head_dim;
  spec.dtype = dtype;
  return spec.bytes_per_token_per_layer() / 2;
}

// Bytes of K and V one decode call reads: every request's whole context, every KV head.
double case_bytes(const AttentionShape& h, DType dtype, int context, int batch) {
  return static_cast<double>(batch) * context * 2.0 * static_cast<double>(token_bytes(h, dtype));
}

// One layer's K plane (V is as large) of a case's pool: the batch's blocks and the null block.
size_t plane_bytes(const AttentionShape& h, DType dtype, int context, int batch, bool paged, int block_size) {
  const int blocks_per_request = paged ? (context + block_size - 1) / block_size : 1;
  const size_t tokens_per_block = static_cast<size_t>(paged ? block_size : context);
  const auto num_blocks = static_cast<size_t>(batch * blocks_per_request + 1);
  return num_blocks * tokens_per_block * token_bytes(h, dtype);
}
size_t layer_bytes(const AttentionShape& h, DType dtype, int context, int batch, bool paged, int block_size) {
  return (2 * plane_bytes(h, dtype, context, batch, paged, block_size) + 63) / 64 * 64;
}

// One buffer, allocated and filled once, holds the K/V of every case: the kernel reads a layer
// through a non-owning KVLayerView, so each case lays its own views over it (paged or
// contiguous, one view per rotated layer). Every 16-bit half-word is a value of magnitude in
// [2^-7, 2) with a random sign, so the bytes read as f16, as bf16 and (two halves) as f32 are all
// normal numbers.
class KVBuffer {
 public:
  explicit KVBuffer(size_t bytes) : arena_(spec(), 1, static_cast<int>((bytes + kBlockBytes - 1) / kBlockBytes)) {
    std::mt19937_64 rng(12345);
    std::vector<uint16_t> pattern((size_t{1} << 20) / sizeof(uint16_t));
    for (auto& h : pattern) h = static_cast<uint16_t>(0x2000 + rng() % 0x2000) | static_cast<uint16_t>(rng() & 0x8000);
    auto* out = static_cast<std::byte*>(arena_.data());
    const size_t pattern_bytes = pattern.size() * sizeof(uint16_t);
    for (size_t off = 0; off < arena_.bytes(); off += pattern_bytes)
      std::memcpy(out + off, pattern.data(), std::min(pattern_bytes, arena_.bytes() - off));
  }
  std::byte* data() { return static_cast<std::byte*>(arena_.data()); }
  size_t bytes() const { return arena_.bytes(); }

 private:
  static constexpr size_t kBlockBytes = size_t{1} << 20;  // the arena's blocks: 1 MiB of f16
  static KVCacheSpec spec() {
    KVCacheSpec s;
    s.dtype = DType::kF16;
    s.block_size = 1024;
    s.num_kv_heads = 1;
    s.head_dim = 256;  // x 2 (K, V) x 2 bytes x 1024 tokens = 1 MiB per block
    return s;
  }
  KVArena arena_;
};

// Decode calls over a batch whose requests each have `context` tokens, paged or contiguous,
// rotating layers; round() times calls for a while and returns the time per call.
class DecodeRun {
 public:
  DecodeRun(const BenchOptions& o, KVBuffer& buffer, DType dtype, int context, int batch, bool paged, int layers,
            KernelIsa isa, std::mt19937_64& rng, bool cascade)
      : layers_(layers), isa_(isa), cpu_clock_(o.clock == "cpu") {
    const int blocks_per_request = paged ? (context + o.block_size - 1) / o.block_size : 1;
    const int block_size = paged ? o.block_size : context;
    const int num_blocks = batch * blocks_per_request + 1;  // + the null block
    const size_t plane = plane_bytes(o.shape, dtype, context, batch, paged, o.block_size);
    const size_t layer = layer_bytes(o.shape, dtype, context, batch, paged, o.block_size);
    if (layer * static_cast<size_t>(layers) > buffer.bytes())
      throw InvariantError("bench attention: the K/V buffer is too small for its largest case");
    for (int l = 0; l < layers; ++l) {
      KVLayerView v;
      v.key = buffer.data() + static_cast<size_t>(l) * layer;
      v.value = static_cast<std::byte*>(v.key) + plane;
      v.dtype = dtype;
      v.num_blocks = num_blocks;
      v.block_size = block_size;
      v.num_kv_heads = o.shape.num_kv_heads;
      v.head_dim = o.shape.head_dim;
      views_.push_back(v);
    }
    // Paged: every request's blocks are scattered over the whole pool. Contiguous: request i's
    // single block holds its context as one [context][heads][dim] array.
    ids_.resize(static_cast<size_t>(num_blocks - 1));
    std::iota(ids_.begin(), ids_.end(), 1);
    if (paged) std::shuffle(ids_.begin(), ids_.end(), rng);
    // A shared prefix: every request's first blocks are request 0's.
    const int shared_blocks = paged ? std::min(o.shared_prefix / o.block_size, blocks_per_request) : 0;
    for (int r = 1; r < batch; ++r)
      std::copy_n(ids_.begin(), shared_blocks, ids_.begin() + static_cast<std::ptrdiff_t>(r) * blocks_per_request);
    query_start_.resize(static_cast<size_t>(batch) + 1);
    std::iota(query_start_.begin(), query_start_.end(), 0);
    context_lens_.assign(static_cast<size_t>(batch), context);
    batch_.num_requests = batch;
    batch_.query_start = query_start_.data();
    batch_.context_lens = context_lens_.data();
    batch_.block_tables = ids_.data();
    batch_.block_table_stride = blocks_per_request;
    batch_.cascade = cascade;
    shape_ = o.shape;
    shape_.scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim));
    query_.resize(static_cast<size_t>(batch) * static_cast<size_t>(shape_.num_q_heads) *
                  static_cast<size_t>(shape_.head_dim));
    out_.resize(query_.size());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& q : query_) q = normal(rng);
    for (int l = 0; l < std::min(layers, 2); ++l) call();  // warm-up
  }

  double round(double seconds) {
    auto now = [this] { return cpu_clock_ ? thread_cpu_seconds() : wall_seconds(); };
    int calls = 0;
    const double start = now();
    double elapsed = 0;
    do {
      call();
      ++calls;
      elapsed = now() - start;
    } while (elapsed < seconds);
    return elapsed / calls;
  }

 private:
  void call() {
    paged_attention(shape_, batch_, views_[static_cast<size_t>(next_layer_)], query_.data(), out_.data(), isa_);
    next_layer_ = (next_layer_ + 1) % layers_;
  }

  int layers_ = 1, next_layer_ = 0;
  KernelIsa isa_;
  bool cpu_clock_ = false;
  std::vector<KVLayerView> views_;
  std::vector<int32_t> ids_, query_start_, context_lens_;
  PagedAttentionBatch batch_;
  AttentionShape shape_;
  std::vector<float> query_, out_;
};

// Interleaved rounds of the bandwidth probe, the paged run and the contiguous run.
void measure_case(const BenchOptions& o, KVBuffer& buffer, ReadBandwidthProbe& probe, DType dtype, KernelIsa isa,
                  std::mt19937_64& rng, CaseResult& r) {
  DecodeRun paged(o, buffer, dtype, r.context, r.batch, true, r.layers, isa, rng, !o.no_cascade);
  DecodeRun contiguous(o, buffer, dtype, r.context, r.batch, o.shared_prefix > 0, r.layers, isa, rng, false);
  const double round_seconds = o.seconds / o.rounds;
  std::vector<double> bandwidth, paged_s, contiguous_s, fraction, ratio;
  for (int i = 0; i < o.rounds; ++i) {
    double bw = 0, p = 0, c = 0;
    if (i % 2 == 0) {
      bw = probe.gbps();
      p = paged.round(round_seconds);
      c = contiguous.round(round_seconds);
    } else {  // the reverse order, so that a drift over the round favours neither
      c = contiguous.round(round_seconds);
      p = paged.round(round_seconds);
      bw = probe.gbps();
    }
    bandwidth.push_back(bw);
    paged_s.push_back(p);
    contiguous_s.push_back(c);
    fraction.push_back(r.kv_bytes / p / 1e9 / bw);
    ratio.push_back(p / c);
  }
  const double p = median(paged_s), c = median(contiguous_s);
  r.paged = Measured{p * 1e3, r.kv_bytes / p / 1e9};
  r.contiguous = Measured{c * 1e3, r.kv_bytes / c / 1e9};
  r.read_bandwidth = median(bandwidth);
  r.fraction_of_bandwidth = median(fraction);
  r.paged_over_contiguous = median(ratio);
}

// --heads Q/KV into shape (Q a multiple of KV: grouped-query attention).
void parse_head_counts(const std::string& heads, AttentionShape& shape) {
  const auto whole = [](std::string_view text, int& n) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    return ec == std::errc() && end == text.data() + text.size() && n > 0;
  };
  const size_t slash = heads.find('/');
  if (slash == std::string::npos || !whole(std::string_view(heads).substr(0, slash), shape.num_q_heads) ||
      !whole(std::string_view(heads).substr(slash + 1), shape.num_kv_heads))
    throw ConfigError(
        fmt::format("--heads must be Q/KV (positive query and KV head counts, e.g. 32/8), got '{}'", heads));
  if (shape.num_q_heads % shape.num_kv_heads != 0)
    throw ConfigError(fmt::format("--heads {}: the query heads must be a multiple of the KV heads", heads));
}

int run_bench_attention(BenchOptions o, bool quick) {
  if (quick) {
    o.contexts = {512};
    o.batches = {1, 4};
    o.rotate_mib = 32;
    o.bandwidth_mib = 64;
    o.seconds = 0.02;
    o.rounds = 3;
  }
  if (o.threads > 0) set_kernel_threads(o.threads);
  if (o.clock != "wall" && o.clock != "cpu")
    throw ConfigError(fmt::format("--clock must be wall or cpu, got '{}'", o.clock));
  if (o.clock == "cpu" && kernel_threads() != 1)
    throw ConfigError(
        fmt::format("--clock cpu measures one thread's CPU time: add --threads 1 (now {} threads)", kernel_threads()));
  if (o.rounds < 1) throw ConfigError(fmt::format("--rounds must be at least 1, got {}", o.rounds));
  if (o.block_size < 1) throw ConfigError(fmt::format("--block-size must be positive, got {}", o.block_size));
  if (o.shared_prefix < 0) throw ConfigError(fmt::format("--shared-prefix must be >= 0, got {}", o.shared_prefix));
  for (int context : o.contexts)
    if (o.shared_prefix > 0 && o.shared_prefix / o.block_size * o.block_size >= context)
      throw ConfigError(fmt::format("--shared-prefix {}: context {} leaves no private suffix after the shared blocks",
                                    o.shared_prefix, context));
  parse_head_counts(o.heads, o.shape);
  if (o.shape.head_dim < 1 || o.shape.head_dim > 1024)
    throw ConfigError(fmt::format("--head-dim must be between 1 and 1024, got {}", o.shape.head_dim));
  const KernelIsa isa = resolve_isa(parse_isa(o.isa.c_str(), "--isa"));
  std::vector<DType> dtypes;
  for (const auto& name : o.dtypes) {
    const auto t = parse_dtype(name);
    if (!t || !is_storage_dtype(*t))
      throw ConfigError(fmt::format("--dtypes: '{}' is not fp32, fp16, bf16, int8 or fp8", name));
    dtypes.push_back(*t);
  }
  const int threads = kernel_threads();
  ReadBandwidthProbe probe(static_cast<size_t>(o.bandwidth_mib * (1 << 20)), threads, o.clock == "cpu");
  const ReadBandwidth bw = measure_read_bandwidth(probe, quick ? 3 : 5);  // for the header

  if (!o.json) {
    fmt::print("decode attention, {} query heads / {} KV heads, head dim {}, {} threads, {} path, {} clock\n",
               o.shape.num_q_heads, o.shape.num_kv_heads, o.shape.head_dim, threads, isa_name(isa), o.clock);
    if (o.shared_prefix > 0)
      fmt::print("shared prefix: the first {} tokens' blocks of every request are the same; {}\n",
                 o.shared_prefix / o.block_size * o.block_size,
                 o.no_cascade ? "cascade attention off (no comparison)" : "cascade attention on vs off");
    fmt::print("read bandwidth ({} MiB streamed, {} threads): {:.1f} GB/s median, {:.1f} best\n", bw.bytes >> 20,
               threads, bw.gbps_median, bw.gbps_best);
    fmt::print("{:>5} {:>7} {:>5} {:>9} {:>6} | {:>6} | {:>9} {:>8} {:>6} | {:>9} {:>8} | {:>8}\n", "dtype", "context",
               "batch", "KV MiB", "layers", "bw", "paged ms", "GB/s", "of bw",
               o.shared_prefix > 0 ? "off ms" : "contig ms", "GB/s", o.shared_prefix > 0 ? "on/off" : "paged/c");
  }
  // The buffer: room for the rotated layers of the largest case.
  const double rotate_bytes = o.rotate_mib * (1 << 20);
  auto layers_for = [&](double bytes) {
    return static_cast<int>(std::clamp(std::ceil(rotate_bytes / bytes), 1.0, 512.0));
  };
  size_t buffer_bytes = size_t{1} << 20;
  for (DType dtype : dtypes)
    for (int context : o.contexts)
      for (int batch : o.batches) {
        const double bytes = case_bytes(o.shape, dtype, context, batch);
        if (bytes > o.max_gib * (1 << 30)) continue;
        for (bool paged : {true, false})
          buffer_bytes = std::max(buffer_bytes, static_cast<size_t>(layers_for(bytes)) *
                                                    layer_bytes(o.shape, dtype, context, batch, paged, o.block_size));
      }
  KVBuffer buffer(buffer_bytes);
  std::mt19937_64 rng(12345);
  std::vector<CaseResult> results;
  for (DType dtype : dtypes)
    for (int context : o.contexts)
      for (int batch : o.batches) {
        CaseResult r;
        r.dtype = std::string(dtype_name(dtype));
        r.context = context;
        r.batch = batch;
        r.kv_bytes = case_bytes(o.shape, dtype, context, batch);
        if (r.kv_bytes > o.max_gib * (1 << 30)) {
          r.skipped =
              fmt::format("K/V of {:.1f} GiB per layer exceeds --max-gib {}", r.kv_bytes / (1 << 30), o.max_gib);
        } else {
          r.layers = layers_for(r.kv_bytes);
          measure_case(o, buffer, probe, dtype, isa, rng, r);
        }
        if (!o.json) {
          if (r.skipped) {
            fmt::print("{:>5} {:>7} {:>5} {:>9.0f}  skipped: {}\n", r.dtype, context, batch, r.kv_bytes / (1 << 20),
                       *r.skipped);
          } else {
            fmt::print(
                "{:>5} {:>7} {:>5} {:>9.1f} {:>6} | {:>6.1f} | {:>9.3f} {:>8.2f} {:>5.0f}% | {:>9.3f} {:>8.2f} | "
                "{:>8.3f}\n",
                r.dtype, context, batch, r.kv_bytes / (1 << 20), r.layers, r.read_bandwidth, r.paged.ms, r.paged.gbps,
                100 * r.fraction_of_bandwidth, r.contiguous.ms, r.contiguous.gbps, r.paged_over_contiguous);
          }
          std::fflush(stdout);
        }
        results.push_back(std::move(r));
      }

  if (o.json) {
    nlohmann::json cases = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json c{{"dtype", r.dtype},
                       {"context_len", r.context},
                       {"batch", r.batch},
                       {"kv_bytes_per_layer", r.kv_bytes},
                       {"read_bandwidth_gbps", r.read_bandwidth},
                       {"threads", threads},
                       {"q_heads", o.shape.num_q_heads},
                       {"kv_heads", o.shape.num_kv_heads},
                       {"head_dim", o.shape.head_dim},
                       {"clock", o.clock},
                       {"shared_prefix", o.shared_prefix / o.block_size * o.block_size},
                       {"cascade", !o.no_cascade},
                       {"isa", isa_name(isa)}};
      if (r.skipped) {
        c["skipped"] = *r.skipped;
      } else {
        c["layers_rotated"] = r.layers;
        c["paged_ms"] = r.paged.ms;
        c["gbps"] = r.paged.gbps;
        c["fraction_of_bandwidth"] = r.fraction_of_bandwidth;
        if (o.shared_prefix > 0) {
          c["cascade_off_ms"] = r.contiguous.ms;
          c["cascade_over_off"] = r.paged_over_contiguous;
        } else {
          c["contiguous_ms"] = r.contiguous.ms;
          c["contiguous_gbps"] = r.contiguous.gbps;
          c["paged_over_contiguous"] = r.paged_over_contiguous;
        }
      }
      cases.push_back(std::move(c));
    }
    nlohmann::json j{
        {"read_bandwidth",
         {{"gbps_median", bw.gbps_median}, {"gbps_best", bw.gbps_best}, {"bytes", bw.bytes}, {"threads", bw.threads}}},
        {"cases", std::move(cases)}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print(
        "bw: read bandwidth probed between this case's rounds (median); GB/s: bytes of K and V read once per "
        "call / median time per call; of bw: median over rounds of paged GB/s over that round's bandwidth; "
        "paged/c: median over rounds of paged time over contiguous time{}\n",
        o.shared_prefix > 0 ? "; with --shared-prefix: off = paged with cascade off, on/off = median over rounds "
                              "of cascade-on time over cascade-off time, GB/s counts each request's K/V once"
                            : "");
  }
  return 0;
}

const CommandRegistration kBenchAttentionCommand{Command{
    "bench attention",
    "decode attention GB/s against the measured read bandwidth, paged vs contiguous (Llama-like 32/8 heads, dim 128 "
    "by default)",
    [](CLI::App& sub) -> std::function<int()> {
      auto o = std::make_shared<BenchOptions>();
      auto quick = std::make_shared<bool>(false);
      sub.add_flag("--json", o->json, "print JSON: read_bandwidth and one object per case");
      sub.add_flag("--quick", *quick, "tiny sizes and times (for tests; numbers are not meaningful)");
      sub.add_option("--dtypes", o->dtypes, "KV element types")->delimiter(',')->capture_default_str();
      sub.add_option("--contexts", o->contexts, "context lengths")->delimiter(',')->capture_default_str();
      sub.add_option("--batches", o->batches, "batch sizes")->delimiter(',')->capture_default_str();
      sub.add_option("--block-size", o->block_size, "tokens per block of the paged cache")->capture_default_str();
      sub.add_option("--heads", o->heads, "query heads / KV heads")->capture_default_str();
      sub.add_option("--head-dim", o->shape.head_dim, "elements per head")->capture_default_str();
      sub.add_option("--threads", o->threads, "kernel threads (default: all CPUs)");
      sub.add_option("--max-gib", o->max_gib, "skip cases whose K/V per layer exceeds this")->capture_default_str();
      sub.add_option("--rotate-mib", o->rotate_mib, "least bytes read before a layer is reused")->capture_default_str();
      sub.add_option("--bandwidth-mib", o->bandwidth_mib, "buffer streamed to measure the read bandwidth")
          ->capture_default_str();
      sub.add_option("--seconds", o->seconds, "measuring time per case and layout")->capture_default_str();
      sub.add_option("--rounds", o->rounds, "rounds per measurement; the median is reported")->capture_default_str();
      sub.add_option("--isa", o->isa, "auto, scalar, avx2 or avx512 (auto: the best this CPU has)")
          ->capture_default_str();
      sub.add_option("--shared-prefix", o->shared_prefix,
                     "tokens (whole blocks) at the start of every request's context in the same blocks; compares "
                     "cascade attention on and off")
          ->capture_default_str();
      sub.add_flag("--no-cascade", o->no_cascade, "cascade (shared-prefix) attention off in the paged run");
      sub.add_option(
             "--clock", o->clock,
             "wall, or cpu: the kernel thread's CPU time (with --threads 1; for a machine busy with other jobs)")
          ->capture_default_str();
      return [o, quick] { return run_bench_attention(*o, *quick); };
    }}};

}  // namespace
}  // namespace pagedkv::cli
