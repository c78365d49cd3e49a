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

ReadBandwidth measure_read_bandwidth(size_t bytes, int threads, int repeats, bool thread_cpu_time) {
  if (thread_cpu_time && threads != 1)
    throw UsageError(fmt::format("measure_read_bandwidth: thread CPU time needs 1 thread, got {}", threads));
  if (threads < 1 || repeats < 1 || bytes < (size_t{1} << 20))
    throw UsageError(fmt::format("measure_read_bandwidth: need >= 1 MiB, threads >= 1 and repeats >= 1 (got {} bytes, "
                                 "{} threads, {} repeats)", bytes, threads, repeats));
  const size_t alignment = size_t{2} << 20;
  bytes = (bytes + alignment - 1) / alignment * alignment;
  std::unique_ptr<float, decltype(&std::free)> buffer(static_cast<float*>(std::aligned_alloc(alignment, bytes)),
                                                      &std::free);
  if (!buffer) throw UsageError(fmt::format("measure_read_bandwidth: cannot allocate {} bytes", bytes));
  // Huge pages, as the KV arena asks for: on 4 KiB pages one core streams a third less here.
  (void)madvise(buffer.get(), bytes, MADV_HUGEPAGE);
  const size_t n = bytes / sizeof(float);
  float* data = buffer.get();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) data[i] = 1.0f;  // touch every page from the threads that read it

  const bool avx2 = has_avx2(best_available_isa());
  const size_t share = (n / static_cast<size_t>(threads)) / 64 * 64;  // whole cache lines per thread
  std::vector<double> gbps;
  volatile float sink = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first pass is a warm-up
    float total = 0;
    double seconds = 0;
    if (thread_cpu_time) {
      const double start = thread_cpu_seconds();
      total = avx2 ? detail::sum_floats_avx2(data, n) : sum_floats_sse2(data, n);
      seconds = thread_cpu_seconds() - start;
    } else {
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
    sink = sink + total;
    if (r > 0) gbps.push_back(static_cast<double>(bytes) / seconds / 1e9);
  }
  (void)sink;
  std::sort(gbps.begin(), gbps.end());
  ReadBandwidth result;
  result.gbps_median = gbps[gbps.size() / 2];
  result.gbps_best = gbps.back();
  result.bytes = bytes;
  result.threads = threads;
  result.repeats = repeats;
  return result;
}

}  // namespace pagedkv
