#include "pagedkv/kernels/memory_bandwidth.h"

#include <emmintrin.h>
#include <fmt/format.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "memory_bandwidth_simd.h"
#include "pagedkv/core/cpu_clock.h"
#include "pagedkv/core/error.h"
#include "pagedkv/core/percentile.h"
#include "pagedkv/storage/cpu_isa.h"

namespace pagedkv {
namespace {

float sum_floats_sse2(const float* data, size_t n) {
  __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm_add_ps(a0, _mm_load_ps(data + i));
    a1 = _mm_add_ps(a1, _mm_load_ps(data + i + 4));
    a2 = _mm_add_ps(a2, _mm_load_ps(data + i + 8));
    a3 = _mm_add_ps(a3, _mm_load_ps(data + i + 12));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)));
  float sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += data[i];
  return sum;
}

}  // namespace

struct ReadBandwidthProbe::Buffer {
  std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
};

ReadBandwidthProbe::ReadBandwidthProbe(size_t bytes, int threads, bool thread_cpu_time)
    : buffer_(std::make_unique<Buffer>()), threads_(threads), thread_cpu_time_(thread_cpu_time) {
  if (thread_cpu_time && threads != 1)
    throw UsageError(fmt::format("read bandwidth: thread CPU time needs 1 thread, got {}", threads));
  if (threads < 1 || bytes < (size_t{1} << 20))
    throw UsageError(
        fmt::format("read bandwidth: need >= 1 MiB and threads >= 1 (got {} bytes, {} threads)", bytes, threads));
  const size_t alignment = size_t{2} << 20;
  bytes_ = (bytes + alignment - 1) / alignment * alignment;
  buffer_->data.reset(static_cast<float*>(std::aligned_alloc(alignment, bytes_)));
  if (!buffer_->data) throw UsageError(fmt::format("read bandwidth: cannot allocate {} bytes", bytes_));
  // Huge pages, as the KV arena asks for: on 4 KiB pages one core streams a third less here.
  (void)madvise(buffer_->data.get(), bytes_, MADV_HUGEPAGE);
  const size_t n = bytes_ / sizeof(float);
  float* data = buffer_->data.get();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;  // touch every page from the threads that read it
}

ReadBandwidthProbe::~ReadBandwidthProbe() = default;

double ReadBandwidthProbe::gbps() {
  const bool avx2 = has_avx2(best_available_isa());
  const float* data = buffer_->data.get();
  const size_t n = bytes_ / sizeof(float);
  const size_t share = (n / static_cast<size_t>(threads_)) / 64 * 64;  // whole cache lines per thread
  float total = 0;
  double seconds = 0;
  if (thread_cpu_time_) {
    const double start = thread_cpu_seconds();
    total = avx2 ? detail::sum_floats_avx2(data, n) : sum_floats_sse2(data, n);
    seconds = thread_cpu_seconds() - start;
  } else {
    const int threads = threads_;
    const double start = wall_seconds();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const auto t = static_cast<size_t>(omp_get_thread_num());
      const size_t begin = t * share;
      const size_t count = t + 1 == static_cast<size_t>(threads) ? n - begin : share;
      total += avx2 ? detail::sum_floats_avx2(data + begin, count) : sum_floats_sse2(data + begin, count);
    }
    seconds = wall_seconds() - start;
  }
  volatile float sink = total;  // keeps the sums, so the loads are not optimised away
  (void)sink;
  return static_cast<double>(bytes_) / seconds / 1e9;
}

ReadBandwidth measure_read_bandwidth(ReadBandwidthProbe& probe, int repeats) {
  if (repeats < 1) throw UsageError(fmt::format("measure_read_bandwidth: repeats must be >= 1, got {}", repeats));
  (void)probe.gbps();  // warm-up
  std::vector<double> gbps;
  for (int r = 0; r < repeats; ++r) gbps.push_back(probe.gbps());
  std::sort(gbps.begin(), gbps.end());
  ReadBandwidth result;
  result.gbps_median = percentile_of_sorted(gbps, 50);
  result.gbps_best = gbps.back();
  result.bytes = probe.bytes();
  result.threads = probe.threads();
  result.repeats = repeats;
  return result;
}

ReadBandwidth measure_read_bandwidth(size_t bytes, int threads, int repeats, bool thread_cpu_time) {
  if (repeats < 1) throw UsageError(fmt::format("measure_read_bandwidth: repeats must be >= 1, got {}", repeats));
  ReadBandwidthProbe probe(bytes, threads, thread_cpu_time);
  return measure_read_bandwidth(probe, repeats);
}

}  // namespace pagedkv
