#!/usr/bin/env bash
# The app's own speed beside `specula generate`, in one run, written to bench/app.json
# (scripts/bench-app.py says what it measures). Builds the release app and CLI first, then
# runs the real app in a virtual display (Xvfb), driven through tauri-driver.
#
#     scripts/bench-app.sh [--tokens 256,1500] [--kinds code,prose] [--repeat 3,1] [--out bench/app.json]
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

scripts/build-release.sh
export TAURI_DRIVER="${TAURI_DRIVER:-$HOME/.cache/specula/tools/bin/tauri-driver}"
xvfb-run -a -s "-screen 0 1280x900x24" python3 scripts/bench-app.py \
  --app "$target_dir/release/specula-app" --cli "$target_dir/release/specula" "$@"
