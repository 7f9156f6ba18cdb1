#!/usr/bin/env bash
# The GPU check that travels (docs/gpu.md): a CUDA build of `specula` for compute capability
# 9.0 (Hopper: H100, H200), stripped, with scripts/device-check.sh as check.sh, the Qwen2.5
# tokenizer header and the real pair's acceptance, in one .tar.xz under 60 MiB that a GPU
# machine without Rust, nvcc or network runs as `tar xf BUNDLE && specula-gpu-check/check.sh OUT`.
#
# Usage: scripts/gpu-bundle.sh [OUT_DIR]   (default gpu-bundle/; about 20 min cold, 2 cores)
# Needs: Rust, pip (nvcc comes from scripts/cuda-toolkit.sh), gcc, xz, and the Qwen2.5 0.5B
# model from scripts/fetch-models.sh (its tokenizer only).
#
# Linking: candle links cuBLAS, cuBLASLt, cuRAND, NVRTC and the driver's libcuda. None is needed
# to build, only their names: the build links against stand-ins made here, one per library,
# that define every function cudarc declares for it under the library's real SONAME. On the GPU
# machine check.sh points those names at the real libraries (NVIDIA's Python packages, the
# driver). The CUDA runtime is the real one from the nvcc wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bundle}
limit_mib=60
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
eval "$(scripts/cuda-toolkit.sh)"
target_dir=${CARGO_TARGET_DIR:-target}
tokenizer_model=${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
[ -f "$tokenizer_model" ] || { echo "gpu-bundle: $tokenizer_model is missing: run scripts/fetch-models.sh" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stubs=$work/stubs
mkdir -p "$stubs"
cudarc=$(cargo metadata --format-version 1 --features specula-cli/cuda |
  python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc"))')
cudarc=$(dirname "$cudarc")/src
stub() { # module, library name, SONAME
  grep -oE '^pub unsafe fn [A-Za-z0-9_]+' "$cudarc/$1/sys/mod.rs" | awk '{print "void " $4 "(void) {}"}' | sort -u >"$work/$1.c"
  gcc -shared -fPIC -o "$stubs/lib$2.so" -Wl,-soname,"$3" "$work/$1.c"
  ln -s "lib$2.so" "$stubs/$3" # for the one command run here (the tokenizer header)
}
stub driver cuda libcuda.so.1
stub cublas cublas libcublas.so.13
stub cublaslt cublasLt libcublasLt.so.13
stub curand curand libcurand.so.10
stub nvrtc nvrtc libnvrtc.so.13
ln -s "$CUDA_HOME/lib/libcudart.so.13" "$stubs/libcudart.so"

echo "== build (--features cuda, compute capability $CUDA_COMPUTE_CAP)"
LIBRARY_PATH=$stubs cargo build --release -p specula-cli --features cuda

bundle=$work/specula-gpu-check
mkdir -p "$bundle/bin" "$bundle/acceptance"
cp "$target_dir/release/specula" "$bundle/bin/specula"
strip "$bundle/bin/specula"
cp scripts/device-check.sh "$bundle/check.sh"
cp bench/kernels-model.json "$bundle/acceptance/"
LD_LIBRARY_PATH=$stubs:$CUDA_HOME/lib "$bundle/bin/specula" synth --tokenizer-only \
  --tokenizer-from "$tokenizer_model" --out "$bundle/qwen2.5-tokenizer.gguf"
git rev-parse HEAD >"$bundle/COMMIT"

mkdir -p "$out"
tar -C "$work" -cJf "$out/specula-gpu-check.tar.xz" specula-gpu-check
size=$(stat -c %s "$out/specula-gpu-check.tar.xz")
echo "gpu-bundle: $out/specula-gpu-check.tar.xz, $((size / 1048576)) MiB ($size bytes); binary $(($(stat -c %s "$bundle/bin/specula") / 1048576)) MiB unpacked"
if [ "$size" -gt $((limit_mib * 1048576)) ]; then
  echo "gpu-bundle: over the $limit_mib MiB limit" >&2
  exit 1
fi
