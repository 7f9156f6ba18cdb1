#!/usr/bin/env bash
# Exactness and speed on an NVIDIA GPU, in one run of under 10 minutes on a machine with a GPU,
# its driver, the CUDA toolkit (nvcc), Rust and the models (scripts/fetch-models.sh):
#   1. builds `specula` and the exactness tests with `--features cuda`;
#   2. runs the greedy identity, reproducible-mode, all-positions and rollback tests on the GPU
#      (SPECULA_TEST_DEVICE=cuda);
#   3. benches plain against speculative decoding on the Qwen pair on the GPU;
#   4. writes everything to bench/gpu/ (GPU name, test log, bench table and JSON).
# Usage: scripts/gpu-check.sh [--quick]
#   --quick: the fast exactness tests only (all positions, rollback, provenance) and 3 prompts
#   a set of 32 tokens; without it, every test of the two files and 10 prompts of 128 tokens.
# Exits non-zero when a test fails or a speculative reply differs from the plain one; the
# bench still runs after a failed test, so one run says as much as it can.
# SPECULA_GPU_CHECK_DEVICE=cpu runs the same steps on the CPU without CUDA: the script's own
# check on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

device=${SPECULA_GPU_CHECK_DEVICE:-cuda}
limit=10 tokens=128 filter=()
if [ "${1:-}" = "--quick" ]; then
  limit=3 tokens=32 filter=(scores_every_position rollback_is_exact provenance_carries_p_and_q)
fi
models=${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}
target=$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
draft=$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
out=bench/gpu
[ "$device" = cuda ] || out=bench/gpu-dry-run
mkdir -p "$out"

for file in "$target" "$draft"; do
  [ -f "$file" ] || { echo "gpu-check: $file is missing: run scripts/fetch-models.sh" >&2; exit 2; }
done

features=()
if [ "$device" = cuda ]; then
  command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi: is this a GPU machine?" >&2; exit 2; }
  command -v nvcc >/dev/null || { echo "gpu-check: nvcc is not on PATH (scripts/cuda-toolkit.sh fetches one)" >&2; exit 2; }
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | tee "$out/gpu.txt"
  # candle's kernels are compiled for this GPU only: a fat build for every arch takes far longer.
  export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d .)}
  features=(--features cuda)
else
  echo "cpu (dry run of the GPU check)" | tee "$out/gpu.txt"
fi

echo "== build"
cargo build --release -p specula-cli "${features[@]}"
cargo test -p specula-engine "${features[@]}" --test speculative --test models --no-run

echo "== exactness tests on $device"
# The test profile keeps debug assertions, which check both caches' lengths after every step.
# The candle-transformers comparisons keep their reference on the CPU; everything else loads
# the models on the device under test.
status=0
SPECULA_TEST_DEVICE=$device cargo test -p specula-engine "${features[@]}" \
  --test speculative --test models -- --test-threads=1 "${filter[@]}" 2>&1 | tee "$out/tests.log" || status=1

echo "== bench on $device (plain vs speculative, side by side, $limit prompts a set)"
for kind in code prose; do
  target/release/specula bench --device "$device" --model "$target" --draft "$draft" \
    --k 1,4,auto --max-tokens "$tokens" --kind "$kind" --limit "$limit" --json "$out/bench-$kind.json" 2>&1 |
    tee "$out/bench-$kind.txt" || status=1
done
echo "gpu-check: results in $out/ ($([ $status = 0 ] && echo passed || echo FAILED))"
exit $status
