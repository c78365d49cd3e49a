// CPU time of the calling thread (internal to src/replay): replay reports it beside wall time
// because on a shared machine wall time measures the neighbours as much as the replay.
#pragma once

#include <ctime>

namespace pagedkv::replay_internal {

inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace pagedkv::replay_internal
