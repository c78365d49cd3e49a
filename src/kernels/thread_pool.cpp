#include "pagedkv/kernels/thread_pool.h"

#include <fmt/format.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

int default_threads() {
  if (const char* env = std::getenv("PAGEDKV_NUM_THREADS"); env != nullptr) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return omp_get_num_procs();  // CPUs this process may run on (respects its affinity mask)
}

std::atomic<int> configured_threads{0};  // 0: not set, use default_threads()

}  // namespace

int kernel_threads() {
  const int n = configured_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  static const int fallback = default_threads();
  return fallback;
}

void set_kernel_threads(int n) {
  if (n < 1) throw UsageError(fmt::format("kernel thread count must be at least 1, got {}", n));
  configured_threads.store(n, std::memory_order_relaxed);
}

}  // namespace pagedkv
