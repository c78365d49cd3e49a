// The machine's streaming read bandwidth: the floor against which memory-bound kernels (decode
// attention reads each K and V byte once) are judged.
#pragma once

#include <cstddef>

namespace pagedkv {

struct ReadBandwidth {
  double gbps_median = 0;  // 1e9 bytes per second
  double gbps_best = 0;
  size_t bytes = 0;        // buffer size read per repetition
  int threads = 0;
  int repeats = 0;
};

// `threads` threads of the kernel pool each sum their share of a `bytes`-byte buffer (allocated
// and touched first), `repeats` times; the buffer should be several times the last-level cache.
// Uses AVX2 loads when the CPU has them, as the kernels do. With thread_cpu_time (threads must
// be 1) time is the reading thread's CPU time, not wall-clock time: on a machine busy with other
// jobs that still measures what one core can stream while it runs.
ReadBandwidth measure_read_bandwidth(size_t bytes, int threads, int repeats, bool thread_cpu_time = false);

}  // namespace pagedkv
