// CPU-time clocks. Benchmarks and replays report CPU time beside wall time because on a machine
// shared with other jobs wall time measures the neighbours as much as the work.
#pragma once

#include <chrono>
#include <ctime>

namespace pagedkv {

namespace cpu_clock_detail {
inline double seconds_of(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}  // namespace cpu_clock_detail

// CPU seconds consumed by the calling thread.
inline double thread_cpu_seconds() { return cpu_clock_detail::seconds_of(CLOCK_THREAD_CPUTIME_ID); }

// CPU seconds consumed by every thread of the process (kernel worker threads included).
inline double process_cpu_seconds() { return cpu_clock_detail::seconds_of(CLOCK_PROCESS_CPUTIME_ID); }

// Monotonic wall-clock seconds, the baseline the CPU clocks are reported beside.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace pagedkv
