#!/usr/bin/env bash
# The GPU check's one command: exactness and costs on the device with synthetic models only
# (`specula device-check`), in a few minutes on an H200. scripts/gpu-bundle.sh packs it as the
# bundle's check.sh beside a CUDA build of `specula`, the Qwen2.5 tokenizer header and the
# real pair's acceptance (bench/kernels-model.json).
#
# Usage, on the GPU machine, in the unpacked bundle:   ./check.sh OUT_DIR
#   prints the GPU, finds cuBLAS, cuRAND, NVRTC, the CUDA runtime and the driver's libcuda (the
#   NVIDIA Python packages, the driver's folders), runs the check and writes gpu.txt, ldd.txt,
#   device-check.log, device-check.json and device-check.md to OUT_DIR; the synthetic models
#   (6 GB) go to $SPECULA_CHECK_MODELS (default /tmp/specula-check-models).
# The dry run on the CPU (CI):
#   SPECULA_BIN=target/debug/specula SPECULA_CHECK_DEVICE=cpu scripts/device-check.sh OUT_DIR \
#     --targets tiny-q4k --draft tiny-q5
# Extra arguments go to `specula device-check`. Exit status: 0 all checks passed, 1 one failed,
# 2 the check could not run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: check.sh OUT_DIR [specula device-check options]}
shift
bin=${SPECULA_BIN:-$here/bin/specula}
device=${SPECULA_CHECK_DEVICE:-cuda}
models=${SPECULA_CHECK_MODELS:-/tmp/specula-check-models}
mkdir -p "$out" "$models"
[ -x "$bin" ] || { echo "device-check: no specula binary at $bin" >&2; exit 2; }

if [ "$device" != cpu ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | tee "$out/gpu.txt" ||
    { echo "device-check: nvidia-smi failed: is this a GPU machine?" >&2; exit 2; }
  # The binary was linked against stand-ins named as the CUDA 13 libraries are: give each
  # name it needs the first library of that name found here.
  dirs=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64)
  while IFS= read -r dir; do dirs+=("$dir"); done < <(python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null || true)
  # Their folders go on the path too, for what they load in turn (cuBLAS loads cuBLASLt).
  links=$(mktemp -d) path=$links
  for missing in $(ldd "$bin" | awk '/not found/ {print $1}'); do
    found=$(find "${dirs[@]}" -maxdepth 4 -name "${missing%%.so*}.so*" 2>/dev/null | sort -V | tail -n1 || true)
    [ -n "$found" ] && ln -sf "$found" "$links/$missing" && path+=":$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldd "$bin" | tee "$out/ldd.txt"
  if grep -q 'not found' "$out/ldd.txt"; then
    echo "device-check: libraries not found (see ldd.txt); searched ${dirs[*]}" >&2
    exit 2
  fi
fi

args=(--device "$device" --out "$out" --models "$models")
[ -f "$here/qwen2.5-tokenizer.gguf" ] && args+=(--tokenizer-from "$here/qwen2.5-tokenizer.gguf")
for file in "$here"/acceptance/*.json "$here"/../bench/kernels-model.json; do
  [ -f "$file" ] && args+=(--acceptance "$file")
done
set -o pipefail
status=0
"$bin" device-check "${args[@]}" "$@" 2>&1 | tee "$out/device-check.log" || status=$?
rm -f "$models"/*-seed[12].gguf
exit "$status"
