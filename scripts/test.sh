#!/usr/bin/env bash
# Every test, from a fresh machine: system packages and tauri-driver (scripts/install-deps.sh),
# the real models (cached under ~/.cache), then formatting, lints, the Rust unit and
# integration tests, the server's tests with the official OpenAI client (Node.js), the web
# UI's unit tests (vitest), its chat flow in headless chromium against `specula serve --ui`,
# and the desktop app in its real webview (tauri-driver + WebKitWebDriver under Xvfb).
# Screenshots land in ui/e2e/artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

scripts/install-deps.sh
scripts/fetch-models.sh all

# The web UI first: the desktop app embeds ui/dist when it compiles.
(cd ui && npm ci --no-audit --no-fund && npm run build && npm test)

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# One build for the test binaries and the binaries the end-to-end tests drive (built
# apart, they would unify features differently and compile half the tree twice).
cargo build --workspace --bins --tests
# Integration tests run real models; one test at a time keeps memory low and lets each
# test use both cores.
cargo test --workspace -- --test-threads=1

(cd tests/server && npm ci --no-audit --no-fund && SPECULA_BIN="$target_dir/debug/specula" npm test)
(cd ui && SPECULA_BIN="$target_dir/debug/specula" npm run e2e)
(cd ui && SPECULA_APP="$target_dir/debug/specula-app" TAURI_DRIVER="$HOME/.cache/specula/tools/bin/tauri-driver" \
    xvfb-run -a node --test e2e/app.test.mjs e2e/app-memory.test.mjs)
