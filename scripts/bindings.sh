#!/usr/bin/env bash
# Write ui/src/api/bindings.ts, the UI's TypeScript for the app's commands and the contract's
# types (crates/protocol), from the Rust definitions (src-tauri/bindings.rs). CI fails while the
# committed file differs from what the types say.
set -euo pipefail
cd "$(dirname "$0")/.."
SPECULA_WRITE_BINDINGS=1 cargo test -p specula-app --lib bindings:: -- --quiet
