#!/usr/bin/env bash
# The main job, from a fresh machine: install what the desktop app needs, fetch the default
# model pair (Qwen2.5-Coder-1.5B-Instruct verified, Qwen2.5-Coder-0.5B-Instruct drafting,
# k auto), build the web UI and start the app. `scripts/run.sh --cli` chats in the terminal
# instead.
set -euo pipefail
cd "$(dirname "$0")/.."

# Everything this needs, checked before the 1.6 GB download (one line per problem).
mode=app
[ "${1:-}" != "--cli" ] || mode=cli
scripts/preflight.sh "$mode"
scripts/fetch-models.sh qwen
models="${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}"
if [ "${1:-}" = "--cli" ]; then
    shift
    exec cargo run --quiet --release -p specula-cli -- chat \
      --model "$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" \
      --draft "$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" \
      "$@"
fi
scripts/install-deps.sh --app-only
(cd ui && npm ci --no-audit --no-fund && npm run build)
SPECULA_MODELS_DIR="$models" exec cargo run --release -p specula-app
