#!/usr/bin/env bash
# Installs the Debian packages pagedkv needs (only those missing) and builds into build/.
# Usage: scripts/setup.sh            (release build in build/)
#        BUILD_DIR=build-asan SANITIZE=address,undefined scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config
          libxxhash-dev liburing-dev libssl-dev libfmt-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libomp-dev
          python3 python3-dev pybind11-dev python3-numpy python3-pytest gnuplot-nox)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing missing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD_DIR=${BUILD_DIR:-build}
SANITIZE=${SANITIZE:-}
JOBS=${JOBS:-$(nproc)}
TARGETS=${TARGETS:-}   # space-separated build targets; empty = everything
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPAGEDKV_SANITIZE="$SANITIZE" -DPython3_EXECUTABLE=/usr/bin/python3 ${CMAKE_ARGS:-} >/dev/null
if [ -n "$TARGETS" ]; then
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$JOBS" --target $TARGETS
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
