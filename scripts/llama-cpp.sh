#!/usr/bin/env bash
# llama.cpp, the reference implementation, for side-by-side benchmarks: built from the tree
# vendored in llama-cpp-python's source distribution on PyPI (this machine reaches PyPI, not
# GitHub), CPU only, Release, -march=native, into ~/.cache/specula/llama.cpp. Nothing of it is
# committed. Prints the folder holding llama-bench, llama-completion and llama-speculative-simple.
#
#   scripts/llama-cpp.sh            # build once (about 10 minutes on 2 cores), then print
#   scripts/llama-cpp.sh --server   # llama-server instead (about 25 minutes), in build-server/bin
set -euo pipefail

version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
root="${SPECULA_LLAMA_CPP:-$HOME/.cache/specula/llama.cpp}"
build=build
server=OFF
targets=(llama-bench llama-completion llama-speculative-simple)
if [ "${1:-}" = "--server" ]; then
    build=build-server
    server=ON
    targets=(llama-server)
fi
bin="$root/$build/bin"

if [ -x "$bin/${targets[0]}" ] && [ -x "$bin/${targets[-1]}" ]; then
    echo "$bin"
    exit 0
fi
mkdir -p "$root"
cd "$root"

sdist="llama_cpp_python-$version.tar.gz"
if ! echo "$sha256  $sdist" | sha256sum -c --status 2>/dev/null; then
    url=$(curl -fsSL https://pypi.org/simple/llama-cpp-python/ | grep -o "https://[^\"#]*/$sdist" | head -n1)
    [ -n "$url" ] || { echo "llama-cpp-python $version is not on PyPI's index" >&2; exit 1; }
    curl -fsSL "$url" -o "$sdist"
    echo "$sha256  $sdist" | sha256sum -c --status || { echo "$sdist: sha256 mismatch" >&2; exit 1; }
fi
if [ ! -d src ]; then
    mkdir -p src
    tar xzf "$sdist" -C src --strip-components=1
fi

# cmake from its PyPI wheel when the system has none.
if ! command -v cmake >/dev/null; then
    if [ ! -x tools/bin/cmake ]; then
        python3 -m venv tools
        tools/bin/pip install --quiet --only-binary :all: cmake
    fi
    export PATH="$root/tools/bin:$PATH"
fi

cmake -S src/vendor/llama.cpp -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER="$server" >&2
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >&2
echo "$bin"
