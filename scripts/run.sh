#!/usr/bin/env bash
# The main job, from a fresh machine: fetch the default model pair and chat with it,
# Qwen2.5-Coder-1.5B-Instruct verified by Qwen2.5-Coder-0.5B-Instruct drafting (k auto).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh qwen
models="${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}"
exec cargo run --quiet --release -p specula-cli -- chat \
  --model "$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" \
  --draft "$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" \
  "$@"
