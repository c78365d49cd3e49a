// The CLI's OpenMP default: idle kernel threads spin briefly, then sleep.
//
// With OMP_WAIT_POLICY unset, libgomp's idle threads spin for a while (GOMP_SPINCOUNT, 300,000
// rounds: several milliseconds) after every parallel region and at every barrier before they
// sleep. On a machine shared with other work that is ruinous: the spinning threads eat the time
// slices the working ones need, and a barrier waits for a thread the OS has descheduled. On the
// loaded 2-core development machine `pagedkv generate -t 0 -n 256` on stories260K ran at 5-50
// tokens/s with the default, and a 24-request `pagedkv demo` took 12.6 s instead of 0.9 s
// (docs/benchmarks.md). Never spinning (OMP_WAIT_POLICY=passive)
// costs instead a wake-up of the sleeping team at every parallel region: on a KVM guest ~20-60 us,
// a third of a 1K-token decode attention call (0.153 ms passive, 0.095 ms spinning).
//
// So the CLI spins GOMP_SPINCOUNT=3000 rounds (tens of microseconds: long enough to catch the next
// kernel call of the same step, short enough that a descheduled thread costs little). Measured:
// as fast as unbounded spinning on a quiet machine, and no
// slower than passive waiting under a load of 12 busy processes on the 2 cores, where the default
// 300,000 took 28 ms per attention call instead of 1.3-7.6.
//
// libgomp reads its variables once, in its own initialiser, from the environment block the
// process started with: nothing this program does before main() can change them (an entry in
// .preinit_array runs earlier, but glibc reinstates the original environment block before
// libgomp reads it). So when the user has set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, the CLI
// re-executes itself once, before main(), with GOMP_SPINCOUNT=3000 added. Set
// OMP_WAIT_POLICY=passive or =active (or any GOMP_SPINCOUNT) to choose otherwise. If the
// re-execution fails (no /proc), the program simply carries on with the default.
//
// This is the executable's choice, not pagedkv_lib's: a library should not pick its host
// program's threading policy. (The kernels themselves stay on the calling thread for work too
// small to be worth waking a team: see packed_matrix.cpp and paged_attention.cpp.)
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

// Rounds an idle thread spins before it sleeps.
constexpr const char* kSpinCount = "3000";

[[gnu::constructor]] void reexec_with_bounded_openmp_spin() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in || cmdline.empty()) return;
  std::vector<std::string> args;
  for (size_t begin = 0; begin < cmdline.size();) {
    const size_t end = cmdline.find('\0', begin);
    args.push_back(cmdline.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (setenv("GOMP_SPINCOUNT", kSpinCount, 1) != 0) return;
  execv("/proc/self/exe", argv.data());
  unsetenv("GOMP_SPINCOUNT");  // exec failed: leave the environment as it was and carry on
}

}  // namespace
