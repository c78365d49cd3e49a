#!/usr/bin/env bash
# Sets everything up, then runs every test: the unit and integration tests (ctest), the tests
# of tests/asan_tests.txt again under ASan+UBSan, the tier tests under TSan, the Python tests, the
# install test (tests/install: the installed package and pip's module, used by both examples),
# every fuzz target briefly (FUZZ_SECONDS, 10; built with the ASan tests) and a soak with faults (SOAK_MINUTES, 2).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage line says when it starts and how much CPU the stages before it used (user+system of
# every child process: on two cores a build's wall time is about half its CPU time).
stage() {
  # cutime and cstime (fields 16 and 17 of /proc/PID/stat, in clock ticks): the children waited for.
  local cpu
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%d", ($16 + $17) / hz }' "/proc/$$/stat")
  echo "== $1 == (at $((SECONDS / 60)) min $((SECONDS % 60)) s, ${cpu} s CPU so far)"
}
stage "setup and release build"
scripts/setup.sh
JOBS=${JOBS:-$(nproc)}

stage "tests (release build)"
ctest --test-dir build --output-on-failure -j "$JOBS"

stage "core, kernel and template-interpreter tests under ASan+UBSan (clang; the same build makes the fuzz targets)"
# One clang build with libFuzzer's instrumentation serves the sanitized tests and every fuzz target
# (scripts/fuzz.sh, below): the library compiles once for both. Warnings are the GCC builds' job.
sanitized_tests=$(grep -E '^test_' tests/asan_tests.txt | tr '\n' ' ')
fuzz_targets=$(scripts/fuzz.sh | sed 's/^/fuzz_/' | tr '\n' ' ')
# A build-asan configured with another compiler cannot switch to clang in place: start it afresh.
if [ -f build-asan/CMakeCache.txt ] && ! grep -qE '^CMAKE_CXX_COMPILER:[A-Z]+=.*clang' build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
CXX=clang++-14 BUILD_DIR=build-asan SANITIZE=address,undefined TARGETS="$sanitized_tests $fuzz_targets" \
  CMAKE_ARGS="-DPAGEDKV_BUILD_FUZZERS=ON -DPAGEDKV_WERROR=OFF -DPAGEDKV_BUILD_BENCHMARKS=OFF -DPAGEDKV_BUILD_PYTHON=OFF" \
  scripts/setup.sh
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --test-dir build-asan --output-on-failure -L asan -j "$JOBS"

stage "tier, server, router and grammar-mask tests under TSan (transfer engine lanes; the engine thread and its HTTP-side callers; the router's monitors and upstream calls; the grammar mask worker)"
# The kernels' OpenMP runtime (libgomp) is not instrumented: its barriers look like races to
# TSan, so the model runs single-threaded here (PAGEDKV_NUM_THREADS=1); the tiers' own threads
# (transfer engine lanes, io_uring completions) are what this stage checks.
tier_tests="test_tiers_store test_tiers_cache test_tiers_engine test_tiers_crash test_tiers_remote test_remote_redis test_remote_cluster test_server_engine_service test_api_kv_event_log test_api_peer_connection test_router_server test_router_connection_pool test_router_backend_pool test_engine_grammar_overlap"
BUILD_DIR=build-tsan SANITIZE=thread TARGETS="$tier_tests" \
  CMAKE_ARGS="-DPAGEDKV_BUILD_BENCHMARKS=OFF -DPAGEDKV_BUILD_PYTHON=OFF" scripts/setup.sh
PAGEDKV_NUM_THREADS=1 OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp \
  ctest --test-dir build-tsan --output-on-failure -R "^(${tier_tests// /|})\$" -j "$JOBS"

if [ -d bindings/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  stage "Python tests"
  # Artifacts (the dashboard's screenshot under load) are kept in build/test-artifacts.
  OMP_WAIT_POLICY=passive PYTHONPATH=build/python PAGEDKV_ARTIFACTS=build/test-artifacts \
    /usr/bin/python3 -m pytest -q tests/python
fi
stage "install: cmake --install, find_package, pkg-config, pip install ., both examples"
tests/install/test_install.sh build
stage "fuzzing: every target of scripts/fuzz.sh for ${FUZZ_SECONDS:=10} s (libFuzzer, ASan+UBSan; built above)"
mkdir -p build-fuzz
export FUZZ_SECONDS FUZZ_BUILD_DIR=build-asan FUZZ_BUILD=0
# JOBS targets at a time, one core each.
scripts/fuzz.sh | xargs -P "$JOBS" -I{} bash -c \
  'scripts/fuzz.sh {} "$FUZZ_SECONDS" > build-fuzz/{}.log 2>&1 || { echo "{}: FAILED"; tail -40 build-fuzz/{}.log; exit 255; }'
for target in $(scripts/fuzz.sh); do echo "$target: $(grep -E '^Done' "build-fuzz/$target.log")"; done
# Two minutes here (SOAK_MINUTES overrides it): the suite's builds already take most of its time
# on two cores; docs/reliability.md records the longer runs.
stage "soak: two servers, Redis, faults, for ${SOAK_MINUTES:=2} min"
scripts/soak.sh "$SOAK_MINUTES"
stage "all test stages passed"
