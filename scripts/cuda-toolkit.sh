#!/usr/bin/env bash
# The CUDA compiler that candle's kernels need, without a CUDA install: NVIDIA's PyPI wheels
# (nvcc, NVVM, the runtime and C++ headers), pinned by sha256 and unpacked once under
# ~/.cache/specula/cuda. Enough to compile `--features cuda` (the kernels to PTX and a static
# library) on a machine with no GPU; running a CUDA build needs the NVIDIA driver and, to
# link it, cuBLAS, cuRAND and NVRTC as well.
#
# Usage: eval "$(scripts/cuda-toolkit.sh)"   prints the exports (CUDA_HOME, PATH, CUDA_COMPUTE_CAP)
# Env:   SPECULA_CUDA_DIR  where to unpack (default ~/.cache/specula/cuda)
#        CUDA_COMPUTE_CAP  the GPU generation to compile for (default 90: Hopper, H100/H200)
set -euo pipefail

version=13.0
root="${SPECULA_CUDA_DIR:-$HOME/.cache/specula/cuda}/$version"
home="$root/nvidia/cu13"

if [[ ! -x "$home/bin/nvcc" || ! -x "$home/nvvm/bin/cicc" ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cat >"$work/requirements.txt" <<'EOF'
nvidia-cuda-nvcc==13.0.88 --hash=sha256:56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03
nvidia-nvvm==13.0.88 --hash=sha256:c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0
nvidia-cuda-runtime==13.0.96 --hash=sha256:7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
nvidia-cuda-crt==13.0.88 --hash=sha256:2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4
nvidia-cuda-cccl==13.0.85 --hash=sha256:e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649
EOF
  echo "cuda-toolkit: fetching nvcc $version wheels (about 100 MB)" >&2
  pip download --quiet --no-deps --only-binary=:all: --require-hashes \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_12_x86_64 \
    -r "$work/requirements.txt" -d "$work/wheels" >&2
  mkdir -p "$work/unpacked"
  for wheel in "$work"/wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$work/unpacked"
  done
  # Wheels lose the executable bit on the way.
  chmod +x "$work"/unpacked/nvidia/cu13/bin/* "$work"/unpacked/nvidia/cu13/nvvm/bin/*
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  mv "$work/unpacked" "$root"
  "$home/bin/nvcc" --version >&2
fi

echo "export CUDA_HOME='$home'"
echo "export PATH='$home/bin':\"\$PATH\""
echo "export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}"
