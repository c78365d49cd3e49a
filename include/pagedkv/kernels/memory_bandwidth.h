// The machine's streaming read bandwidth: the floor against which memory-bound kernels (decode
// attention reads each K and V byte once) are judged.
#pragma once

#include <cstddef>
#include <memory>

namespace pagedkv {

struct ReadBandwidth {
  double gbps_median = 0;  // 1e9 bytes per second
  double gbps_best = 0;
  size_t bytes = 0;  // buffer size read per repetition
  int threads = 0;
  int repeats = 0;
};

// A buffer of `bytes` bytes (on transparent huge pages, as the KV arena is; touched once by the
// threads that read it) that `threads` threads of the kernel pool sum, each its share, with AVX2
// loads where the CPU has them, as the kernels do. One probe can be read many times: a benchmark
// that reads it right before each of its own rounds compares against the bandwidth the machine
// gave at that moment, which on a shared machine moves by 2x from one second to the next. With
// thread_cpu_time (threads must be 1) time is the reading thread's CPU time, not wall-clock time.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(size_t bytes, int threads, bool thread_cpu_time = false);
  ~ReadBandwidthProbe();
  ReadBandwidthProbe(const ReadBandwidthProbe&) = delete;
  ReadBandwidthProbe& operator=(const ReadBandwidthProbe&) = delete;

  double gbps();  // one pass over the buffer
  size_t bytes() const { return bytes_; }
  int threads() const { return threads_; }

 private:
  struct Buffer;
  std::unique_ptr<Buffer> buffer_;
  size_t bytes_ = 0;
  int threads_ = 1;
  bool thread_cpu_time_ = false;
};

// One warm-up pass, then the median and best of `repeats` passes over the probe's buffer, which
// should be several times the last-level cache.
ReadBandwidth measure_read_bandwidth(ReadBandwidthProbe& probe, int repeats);
// The same over a probe of its own.
ReadBandwidth measure_read_bandwidth(size_t bytes, int threads, int repeats, bool thread_cpu_time = false);

}  // namespace pagedkv
