#!/usr/bin/env bash
# llama.cpp, the reference implementation, for side-by-side benchmarks: built from the tree
# vendored in llama-cpp-python's source distribution on PyPI (this machine reaches PyPI, not
# GitHub), CPU only, Release, into ~/.cache/specula/llama.cpp. Nothing of it is committed.
# Prints the folder holding the binaries; build-info.json there records what was built how.
#
#   scripts/llama-cpp.sh            # llama-bench, llama-completion, llama-speculative-simple (about 10 minutes on 2 cores)
#   scripts/llama-cpp.sh --server   # llama-server, with llama-bench beside it (about 25 minutes)
#   ... --avx2                      # the AVX2 build whatever the CPU has (an AVX2-only host's llama.cpp)
#
# At its best, so that no figure beside it flatters us: the ISA options are read from
# /proc/cpuinfo and named one by one (GGML_NATIVE=ON with Debian's gcc 12, which does not know
# Zen 4, tuned for Zen 3: prefill ~103 t/s against ~113.5 t/s explicit on a 2-core EPYC). A
# build lives in a folder keyed by version, options, CPU flags and compiler, made under a lock:
# a binary built for another CPU or compiler is never reused, and two builds never share a folder.
set -euo pipefail

version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
root="${SPECULA_LLAMA_CPP:-$HOME/.cache/specula/llama.cpp}"
server=OFF
targets=(llama-bench llama-completion llama-speculative-simple)
avx2_only=0
for arg in "$@"; do
    case "$arg" in
        --server) server=ON; targets=(llama-server llama-bench) ;;
        --avx2) avx2_only=1 ;;
        *) echo "usage: scripts/llama-cpp.sh [--server] [--avx2]" >&2; exit 2 ;;
    esac
done

# The CPU's flags, once, and the ggml option each one turns on.
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
isa_options() {
    local -a options=(-DGGML_NATIVE=OFF)
    local pair flag option
    local pairs=(avx:GGML_AVX avx2:GGML_AVX2 fma:GGML_FMA f16c:GGML_F16C bmi2:GGML_BMI2)
    # An AVX2-only host (an EPYC before Zen 4) has no AVX-VNNI either.
    [ "$avx2_only" = 1 ] || pairs+=(avx_vnni:GGML_AVX_VNNI avx512f:GGML_AVX512 avx512vbmi:GGML_AVX512_VBMI avx512_vnni:GGML_AVX512_VNNI avx512_bf16:GGML_AVX512_BF16)
    for pair in "${pairs[@]}"; do
        flag=${pair%%:*}
        option=${pair#*:}
        if has "$flag"; then options+=("-D$option=ON"); else options+=("-D$option=OFF"); fi
    done
    [ "$avx2_only" = 0 ] || options+=(-DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
    echo "${options[@]}"
}
options="$(isa_options) -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server"
compiler=$( (cc --version 2>/dev/null || echo "cc unknown") | head -n1)
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
key=$(printf '%s\n' "$version" "$options" "$flags" "$compiler" "${targets[*]}" | sha256sum | cut -c1-16)
build="$root/build-$key"
bin="$build/bin"

mkdir -p "$root"
exec 9>"$build.lock"
flock 9
ready() { local t; for t in "${targets[@]}"; do [ -x "$bin/$t" ] || return 1; done; [ -f "$bin/build-info.json" ]; }
if ready; then
    echo "$bin"
    exit 0
fi
cd "$root"

sdist="llama_cpp_python-$version.tar.gz"
if ! echo "$sha256  $sdist" | sha256sum -c --status 2>/dev/null; then
    url=$(curl -fsSL https://pypi.org/simple/llama-cpp-python/ | grep -o "https://[^\"#]*/$sdist" | head -n1)
    [ -n "$url" ] || { echo "llama-cpp-python $version is not on PyPI's index" >&2; exit 1; }
    curl -fsSL "$url" -o "$sdist.part"
    echo "$sha256  $sdist.part" | sha256sum -c --status || { echo "$sdist: sha256 mismatch" >&2; exit 1; }
    mv "$sdist.part" "$sdist"
fi
# The sources are shared by every build: unpacked once, under a lock of their own.
(
    flock 8
    if [ ! -f src/.unpacked ]; then
        rm -rf src && mkdir -p src
        tar xzf "$sdist" -C src --strip-components=1
        touch src/.unpacked
    fi
) 8>"$root/src.lock"

# cmake from its PyPI wheel when the system has none.
if ! command -v cmake >/dev/null; then
    (
        flock 8
        if [ ! -x tools/bin/cmake ]; then
            python3 -m venv tools
            tools/bin/pip install --quiet --only-binary :all: cmake
        fi
    ) 8>"$root/tools.lock"
    export PATH="$root/tools/bin:$PATH"
fi

rm -rf "$build"
# shellcheck disable=SC2086 # the options are words
cmake -S src/vendor/llama.cpp -B "$build" $options >&2
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >&2
python3 - "$bin/build-info.json" "$version" "$cpu" "$flags" "$compiler" "$options" <<'PY'
import json, sys
path, version, cpu, flags, compiler, options = sys.argv[1:]
json.dump({"llama_cpp_python": version, "cpu": cpu, "cpu_flags": flags.split(), "compiler": compiler,
           "cmake_options": options.split()}, open(path, "w"), indent=1)
PY
echo "$bin"
