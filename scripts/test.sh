#!/usr/bin/env bash
# Every test, from a fresh machine: fetch the real models (cached under ~/.cache), then
# formatting, lints, unit and integration tests of the engine and the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh all

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Integration tests run real models; one test binary at a time keeps two models in memory at most
# and lets each test use both cores.
cargo test --workspace -- --test-threads=1
