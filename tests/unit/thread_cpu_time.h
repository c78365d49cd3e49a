// The CPU time the calling thread has used. Bounds on work ("refused within a second") are
// checked against it: on a loaded machine (CI, two cores, tests in parallel) wall time measures
// the machine's load as much as the code under test.
#pragma once

#include <ctime>

namespace pagedkv::testing {

inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace pagedkv::testing
