#!/usr/bin/env bash
# Installs pagedkv the way a user does, into a temporary prefix and a temporary virtual
# environment, and then uses it only from there (docs/install.md):
#   - cmake --install: the expected files, `pagedkv --version`, no server/loadgen headers and no
#     HTTP library in the package; every installed header compiles alone against the prefix;
#   - examples/cpp built with find_package (shared and static) and with pkg-config, and run;
#   - pip install . into a venv (offline, Debian's setuptools), examples/python run from outside
#     the source tree, mypy finds the stub through py.typed; pip wheel . holds module, stub, marker.
# Both examples print the same lines; the test compares them.
# Usage: tests/install/test_install.sh [BUILD_DIR]   (a built tree; default build/)
# pip reuses BUILD_DIR's CMake build (PAGEDKV_CMAKE_BUILD_DIR), so nothing is compiled twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
build_dir=$(realpath "${1:-build}")
python=/usr/bin/python3
jobs=${JOBS:-$(nproc)}
version=$(sed -nE 's/^project\(pagedkv VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
work=$(mktemp -d "${TMPDIR:-/tmp}/pagedkv-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
start=$SECONDS

fail() { echo "install test FAILED: $*" >&2; exit 1; }
stage() { echo "-- [$((SECONDS - start)) s] $*"; }

stage "cmake --install $build_dir --prefix <tmp>/prefix"
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
for f in bin/pagedkv lib/libpagedkv.a "lib/libpagedkv.so.$version" lib/libpagedkv.so \
         include/pagedkv/version.h include/pagedkv/manager/kv_cache_manager.h \
         include/pagedkv/storage/block_table.h lib/cmake/pagedkv/pagedkvConfig.cmake \
         lib/cmake/pagedkv/pagedkvConfigVersion.cmake lib/pkgconfig/pagedkv.pc; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
[ "$("$prefix/bin/pagedkv" --version)" = "pagedkv $version" ] || fail "pagedkv --version is not 'pagedkv $version'"
# Public headers only: each installed header is one of include/pagedkv's (version.h is generated),
# and the network layers' headers stay out.
(cd "$prefix/include" && find pagedkv -type f) | sort > "$work/installed-headers"
while read -r h; do
  [ "$h" = pagedkv/version.h ] || [ -f "include/$h" ] || fail "$h is installed but is not a public header"
done < "$work/installed-headers"
grep -qE '^pagedkv/(server|loadgen|remote)/' "$work/installed-headers" && fail "network layers' headers are installed"
# The core package must not drag an HTTP stack along.
if grep -lE 'httplib|prometheus|curl|hiredis' "$prefix"/lib/cmake/pagedkv/*.cmake "$prefix/lib/pkgconfig/pagedkv.pc"; then
  fail "the package names an HTTP or metrics library"
fi
readelf -d "$prefix/lib/libpagedkv.so" | grep -qE 'NEEDED.*(httplib|prometheus|curl|hiredis)' && fail "libpagedkv.so needs an HTTP library"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion pagedkv)" = "$version" ] || fail "pkg-config --modversion is not $version"
cflags=$(pkg-config --cflags pagedkv)
stage "each of the $(wc -l < "$work/installed-headers") installed headers compiles alone (pkg-config's flags, outside the source tree)"
cd "$work"
export cflags
if ! xargs -P "$jobs" -I{} sh -c \
    'echo "#include <{}>" | g++ -std=c++20 -Wall -Wextra -Wpedantic -Werror -fsyntax-only $cflags -x c++ - || { echo "  {} does not compile alone"; exit 1; }' \
    < "$work/installed-headers"; then
  fail "installed headers do not compile alone"
fi

stage "examples/cpp with find_package(pagedkv): shared library"
cmake -S "$repo/examples/cpp" -B ex-shared -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build ex-shared >/dev/null
readelf -d ex-shared/toy_scheduler | grep -q "NEEDED.*libpagedkv.so" || fail "the shared build does not link libpagedkv.so"
ex-shared/toy_scheduler > cpp-shared.txt || fail "toy_scheduler (shared) failed: $(cat cpp-shared.txt)"
grep -q "^finished 8 of 8 requests" cpp-shared.txt || fail "toy_scheduler did not finish its requests"
grep -q "preempt request" cpp-shared.txt || fail "toy_scheduler preempted nothing"
grep -qE "admit request [0-9]+, [1-9][0-9]* of" cpp-shared.txt || fail "toy_scheduler found nothing in the prefix cache"

stage "examples/cpp with find_package(pagedkv COMPONENTS static): static library"
cmake -S "$repo/examples/cpp" -B ex-static -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      -DTOY_SCHEDULER_STATIC=ON >/dev/null
cmake --build ex-static >/dev/null
readelf -d ex-static/toy_scheduler | grep -q "NEEDED.*libpagedkv" && fail "the static build links libpagedkv.so"
ex-static/toy_scheduler > cpp-static.txt || fail "toy_scheduler (static) failed"
cmp -s cpp-shared.txt cpp-static.txt || fail "static and shared builds print different lines"

stage "examples/cpp with pkg-config --cflags --libs pagedkv"
# shellcheck disable=SC2046
g++ -std=c++20 -O1 "$repo/examples/cpp/toy_scheduler.cpp" -o toy_pc $(pkg-config --cflags --libs pagedkv) \
    -Wl,-rpath,"$prefix/lib"
./toy_pc > cpp-pkgconfig.txt || fail "toy_scheduler (pkg-config) failed"
cmp -s cpp-shared.txt cpp-pkgconfig.txt || fail "the pkg-config build prints different lines"

stage "pip install . into a virtual environment (offline, reusing $build_dir)"
# --system-site-packages: Debian's setuptools, wheel and NumPy, nothing from an index.
"$python" -m venv --system-site-packages venv
export PAGEDKV_CMAKE_BUILD_DIR=$build_dir PIP_DISABLE_PIP_VERSION_CHECK=1
(cd "$repo" && "$work/venv/bin/pip" install -q --no-build-isolation --no-index --no-cache-dir .) \
  || fail "pip install . failed"
venv/bin/python -c "
import pathlib, sys, pagedkv
where = pathlib.Path(pagedkv.__file__)
assert where.is_relative_to(sys.prefix), f'imported from {where}, not from the venv'
assert pagedkv.__version__ == '$version', pagedkv.__version__
for f in ('__init__.pyi', 'py.typed'):
    assert (where.parent / f).is_file(), f'{f} is not installed next to the module'
" || fail "the installed module is not the one imported, or lacks its version or stub"
cp "$repo/examples/python/toy_scheduler.py" .
venv/bin/python toy_scheduler.py > python.txt || fail "toy_scheduler.py failed: $(cat python.txt)"
# Same loop, same manager: the Python example must print what the C++ one printed.
diff cpp-shared.txt python.txt || fail "examples/python and examples/cpp print different lines"

if "$python" -c 'import mypy' 2>/dev/null; then
  stage "mypy finds the installed stub (py.typed) and checks the example against it"
  printf 'import pagedkv\nreveal_type(pagedkv.KVCacheManager(num_blocks=8).num_free_blocks)\n' > reveal.py
  "$python" -m mypy --python-executable venv/bin/python --cache-dir mypy-cache toy_scheduler.py reveal.py \
    > mypy.txt 2>&1 || { cat mypy.txt; fail "mypy rejects the example or cannot find the stub"; }
  grep -q 'Revealed type is "builtins.int"' mypy.txt || { cat mypy.txt; fail "mypy does not read the stub"; }
fi

stage "pip wheel ."
(cd "$repo" && "$work/venv/bin/pip" wheel -q --no-build-isolation --no-index --no-deps --no-cache-dir -w "$work/dist" .) \
  || fail "pip wheel . failed"
wheel=$(ls dist/pagedkv-"$version"-*.whl) || fail "no pagedkv-$version wheel"
"$python" -m zipfile -l "$wheel" > wheel.txt
for f in 'pagedkv/__init__\.cpython-[^ ]*\.so' 'pagedkv/__init__\.pyi' 'pagedkv/py\.typed' "pagedkv-$version\.dist-info/METADATA"; do
  grep -qE "^$f " wheel.txt || { cat wheel.txt; fail "the wheel lacks $f"; }
done

stage "install test passed"
