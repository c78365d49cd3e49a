// The kernels' threads. The kernels run on OpenMP's pool, which is created once on first use
// and reused by every later call (no per-call thread creation). These functions fix how many
// of its threads a kernel call uses.
#pragma once

namespace pagedkv {

// Threads each kernel call uses: PAGEDKV_NUM_THREADS if set, else the number of online CPUs,
// unless set_kernel_threads() said otherwise.
int kernel_threads();
// n >= 1; throws UsageError otherwise.
void set_kernel_threads(int n);

// Work below which a kernel call stays on the calling thread, in multiply-adds. Waking the team
// and putting it back to sleep costs tens of microseconds with passive waiting (the CLI
// spins briefly first instead, tools/pagedkv/openmp_defaults.cpp), so a second
// thread only pays for calls of a few million multiply-adds (~100 us of one core). Measured on
// stories260K, 32 requests decoding, passive waiting, 2 threads: 12,011 tokens per CPU-second with
// a 262,144 threshold, 27,144 with this one, 27,303 with one thread (docs/benchmarks.md, "Serving
// engine").
inline constexpr double kMinParallelMultiplyAdds = 4.0 * 1024 * 1024;

}  // namespace pagedkv
