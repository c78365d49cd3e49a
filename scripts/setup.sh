#!/usr/bin/env bash
# Installs the Debian packages pagedkv needs (only those missing) and builds into build/.
# Usage: scripts/setup.sh            (release build in build/)
#        BUILD_DIR=build-asan SANITIZE=address,undefined scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config
          libxxhash-dev liburing-dev libssl-dev libfmt-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libomp-dev
          python3 python3-dev pybind11-dev python3-numpy python3-pytest gnuplot-nox
          python3-jinja2   # the chat-template tests compare with Python's jinja2
          python3-pip python3-setuptools python3-wheel python3-venv python3-mypy
          libcpp-httplib-dev prometheus-cpp-dev libcurl4-openssl-dev
          prometheus python3-requests python3-prometheus-client curl
          libhiredis-dev redis-server
          libpcre2-dev   # the BPE tokenizer's pre-tokenizer patterns
          python3-jsonschema   # the grammar tests validate sampled JSON against its schema
          chromium    # the dashboard test drives it headless (playwright-core from npm)
          clang-14 libclang-rt-14-dev)   # libFuzzer (scripts/fuzz.sh)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm (the OpenAI client test): Debian's, unless the machine already has them.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "setup: installing missing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The JavaScript test tools (the official OpenAI client), pinned by package-lock.json, into the
# project's own node_modules; again only when the lock file is newer than the installed tree.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing the npm packages of package-lock.json into node_modules/"
  npm ci --no-audit --no-fund --loglevel=error
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
