#!/usr/bin/env bash
# Every test, from a fresh machine: system packages and tauri-driver (scripts/install-deps.sh),
# the real models (cached under ~/.cache), then formatting, lints (of the CUDA build too, whose
# kernels nvcc compiles here without a GPU), the Rust unit and
# integration tests, the server's tests with the official OpenAI clients (Node.js and Python), the web
# UI's unit tests (vitest), its chat flow in headless chromium against `specula serve --ui`,
# the desktop app in its real webview (tauri-driver + WebKitWebDriver under Xvfb), and the .deb
# installed into this machine with its app driven through a first run.
# Screenshots land in ui/e2e/artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

# Toolchains, python3 with pip and venv, free disk: checked before anything is installed or
# downloaded; then the check's own test (stub tools, a few seconds).
scripts/preflight.sh test
scripts/preflight-test.sh
scripts/install-deps.sh
scripts/fetch-models.sh all

# What the tests write to temporary folders (the apps' data, downloads from the stand-in Hub:
# gigabytes a run) goes under one folder, removed at exit, passed or failed; left behind, it
# filled the disk of a machine that runs CI often. Set after the system packages: apt's
# helpers run as another user, who could not use a private folder.
TMPDIR=$(mktemp -d -t specula-test.XXXXXX)
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

# The web UI first: the desktop app embeds ui/dist when it compiles.
(cd ui && npm ci --no-audit --no-fund && npm run build && npm test)

cargo fmt --all -- --check
# BENCHMARKS.md and the README's summary must be what bench/*.json say.
python3 scripts/benchmarks.py --check
# Every crate's modules and the UI's read bottom up: a `use crate::` or an import that
# closes a circle fails here.
python3 scripts/module-graph.py --check
cargo clippy --workspace --all-targets -- -D warnings
# The CUDA build compiles here, with no GPU: nvcc from NVIDIA's PyPI wheels compiles candle's
# kernels (for Hopper, the GPU of the GPU check; two at a time), and clippy checks the engine's
# and CLI's CUDA paths. Linking would need cuBLAS and the driver, which a GPU machine has.
(
  cuda_env=$(scripts/cuda-toolkit.sh)
  eval "$cuda_env"
  CUDAFORGE_THREADS=2 cargo clippy -p specula-cli --features cuda -- -D warnings
)
# The official MCP Python SDK, pinned, in a venv of its own (cached beside the models): the
# real MCP server of the tool tests (tests/mcp/arith_server.py) runs on it.
mcp_venv="$HOME/.cache/specula/mcp-venv"
[ -x "$mcp_venv/bin/python" ] || python3 -m venv "$mcp_venv"
"$mcp_venv/bin/pip" install -q --disable-pip-version-check -r tests/mcp/requirements.txt
export SPECULA_MCP_PYTHON="$mcp_venv/bin/python"
# One build for the test binaries and the binaries the end-to-end tests drive (built
# apart, they would unify features differently and compile half the tree twice).
cargo build --workspace --bins --tests
# Integration tests run real models; one test at a time keeps memory low and lets each
# test use both cores.
cargo test --workspace -- --test-threads=1
# The GPU bundle's check (scripts/gpu-bundle.sh, docs/gpu.md), dry run on the CPU so that it
# cannot rot: the bundle's own script, its tokenizer header made as the bundle makes it, tiny
# synthetic models for the costs. A few seconds.
(
  dry=$(mktemp -d)
  trap 'rm -rf "$dry"' EXIT
  "$target_dir/debug/specula" synth --tokenizer-only --out "$dry/qwen2.5-tokenizer.gguf" \
    --tokenizer-from "${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
  SPECULA_BIN="$target_dir/debug/specula" SPECULA_CHECK_DEVICE=cpu SPECULA_CHECK_MODELS="$dry/models" \
    scripts/device-check.sh "$dry/out" --tokenizer-from "$dry/qwen2.5-tokenizer.gguf" \
    --targets tiny-q4k --draft tiny-q5 >/dev/null
  grep -E '^Exactness|c = ' "$dry/out/device-check.md"
)

# The Node steps start servers, browsers, tauri-driver, WebKitWebDriver and the app. Each runs
# contained: under a time limit, with its output in a log file that is printed after it, and
# with whatever it leaves running killed at the end. An orphan that held this script's output
# open would keep a CI job waiting until its own time-out, long after the last test passed.
contained() {
  local name=$1 limit=$2
  shift 2
  local log marker status=0
  log=$(mktemp)
  marker="$name-$$-$RANDOM"
  echo "== $name (at most $limit s)"
  SPECULA_TEST_RUN=$marker timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || status=$?
  cat "$log"
  rm -f "$log"
  reap "$marker"
  [ "$status" -ne 124 ] || echo "$name: still running after $limit s, stopped" >&2
  return "$status"
}

# Kill every process whose environment carries the marker: the step's children and any orphan
# of theirs, wherever it was re-parented.
reap() {
  local environ pid
  for environ in /proc/[0-9]*/environ; do
    if grep -qzx "SPECULA_TEST_RUN=$1" "$environ" 2>/dev/null; then
      pid=${environ#/proc/}
      kill -KILL "${pid%/environ}" 2>/dev/null || true
    fi
  done
}

(cd tests/server && npm ci --no-audit --no-fund)
contained server-tests 900 env -C tests/server SPECULA_BIN="$target_dir/debug/specula" npm test
# The official openai Python SDK, pinned, in a venv of its own (cached beside the models).
sdk_venv="$HOME/.cache/specula/openai-sdk-venv"
[ -x "$sdk_venv/bin/python" ] || python3 -m venv "$sdk_venv"
"$sdk_venv/bin/pip" install -q --disable-pip-version-check -r tests/sdk/requirements.txt
contained openai-sdk 900 env SPECULA_BIN="$target_dir/debug/specula" \
  "$sdk_venv/bin/python" -m unittest -v tests/sdk/test_openai_sdk.py
contained browser-e2e 600 env -C ui SPECULA_BIN="$target_dir/debug/specula" npm run e2e
contained app-e2e 900 env -C ui SPECULA_APP="$target_dir/debug/specula-app" \
  TAURI_DRIVER="$HOME/.cache/specula/tools/bin/tauri-driver" \
  xvfb-run -a node --test e2e/app.test.mjs e2e/app-memory.test.mjs e2e/app-remote.test.mjs e2e/app-disk.test.mjs \
  e2e/app-tools.test.mjs

# The .deb, packaged from the same debug build (no rebuild), installed into this machine, its
# installed app driven through a first run (no models: the Library downloads the recommended
# pair from a stand-in Hub, then a reply with its colours and the speed panel), then removed.
deb=$(scripts/package-deb.sh --debug)
dpkg-deb -c "$deb"
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$deb" >/dev/null
installed=0
for path in /usr/bin/specula-app /usr/bin/specula /usr/share/applications/Specula.desktop; do
  [ -e "$path" ] || { echo "the package did not install $path" >&2; installed=1; }
done
[ "$installed" -eq 0 ] && /usr/bin/specula --version && contained installed-app 600 env -C ui \
  SPECULA_APP=/usr/bin/specula-app TAURI_DRIVER="$HOME/.cache/specula/tools/bin/tauri-driver" \
  xvfb-run -a node --test e2e/app-first-run.test.mjs || installed=1
DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq specula >/dev/null
[ "$installed" -eq 0 ]
