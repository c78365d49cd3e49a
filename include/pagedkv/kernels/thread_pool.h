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

}  // namespace pagedkv
