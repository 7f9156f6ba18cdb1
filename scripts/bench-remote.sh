#!/usr/bin/env bash
# A remote engine through the app beside the same remote called directly, in one run, written to
# bench/remote.json (scripts/bench-remote.py says what it measures). Builds the release app and
# CLI; --engine llama also builds llama.cpp's llama-server once (scripts/llama-cpp.sh --server,
# about 25 minutes, cached under ~/.cache/specula/llama.cpp).
#
#     scripts/bench-remote.sh [--engine specula|llama] [--tokens 256] [--repeat 5]
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

scripts/build-release.sh
llama=()
if [[ " $* " == *" --engine llama "* ]]; then
  llama=(--llama-server "$(scripts/llama-cpp.sh --server)/llama-server")
fi
export TAURI_DRIVER="${TAURI_DRIVER:-$HOME/.cache/specula/tools/bin/tauri-driver}"
xvfb-run -a -s "-screen 0 1280x900x24" python3 scripts/bench-remote.py \
  --app "$target_dir/release/specula-app" --cli "$target_dir/release/specula" "${llama[@]}" "$@"
