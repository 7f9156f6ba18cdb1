#!/usr/bin/env bash
# What the app benches need before they run: the Debian packages, the default model pair, the
# web UI and the release app and CLI (under $CARGO_TARGET_DIR, else target/). Called by
# scripts/bench-app.sh and scripts/bench-remote.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/fetch-models.sh qwen
(cd ui && npm ci --no-audit --no-fund && npm run build)
cargo build --release -p specula-cli -p specula-app
