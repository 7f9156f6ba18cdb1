#!/usr/bin/env bash
# The test of scripts/preflight.sh, in a few seconds: it runs the preflight with a PATH of stub
# tools only (fake cargo, rustc, node, npm, python3, pip, apt-get printing chosen versions, and
# symlinks to the few real tools it needs: no /usr/bin, so the real node or cargo cannot leak
# in). Each missing or too-old prerequisite gives its one line and exit 1, all of them are
# listed, all present passes, apt installs a missing pip, and scripts/run.sh and scripts/test.sh
# stop at the preflight before anything downloads (a stub pip marks any call).
set -euo pipefail
# Reached from scripts/test.sh inside its own stub run (were test.sh to skip the preflight).
[ -z "${SPECULA_PREFLIGHT_TEST:-}" ] || exit 0
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/bin state=$tmp/state
need=$(sed -n '/^\[workspace.package\]/,/^\[/s/^rust-version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
chmod_bin=$(command -v chmod)
failed=0 cases=0

# stub NAME BODY: a /bin/sh script NAME in the stub PATH.
stub() {
  rm -f "$bin/$1"
  printf '#!/bin/sh\n%s\n' "$2" >"$bin/$1"
  chmod +x "$bin/$1"
}

pip_stub() { stub pip ": > '$state/downloaded'; exit 1"; }

# Every prerequisite present, at the lowest versions that pass, on a Debian-like machine.
reset() {
  rm -rf "$bin" "$state" "$tmp/home" "$tmp/models" "$tmp/target"
  mkdir -p "$bin" "$state" "$tmp/home"
  local tool
  for tool in bash env dirname df stat mkdir mktemp seq; do ln -s "$(command -v "$tool")" "$bin/$tool"; done
  stub cargo "echo 'cargo $need.0 (stub 2025-01-01)'"
  stub rustc "echo 'rustc $need.0 (stub 2025-01-01)'"
  stub node "echo v20.19.0"
  stub npm "echo 10.8.2"
  stub python3 "case \"\$*\" in
  --version) echo 'Python 3.11.2' ;;
  '-m pip --version') [ -e '$state/pip-ok' ] && echo 'pip 23.0.1 (stub)' ;;
  '-m pip '*) : > '$state/downloaded'; exit 1 ;;
  '-c '*) [ -e '$state/venv-ok' ] ;;
  *) exit 1 ;;
esac"
  pip_stub
  : >"$state/pip-ok"
  : >"$state/venv-ok"
  # apt-get logs its calls; an install brings pip (module and command) and venv.
  stub apt-get "echo \"\$*\" >> '$state/apt.log'
case \"\$*\" in *install*python3-pip*) : > '$state/pip-ok'; printf '#!/bin/sh\n: > $state/downloaded; exit 1\n' > '$bin/pip'; $chmod_bin +x '$bin/pip' ;; esac
case \"\$*\" in *install*python3-venv*) : > '$state/venv-ok' ;; esac"
  stub dpkg "exit 0"
  stub sudo 'exec "$@"'
}

no_apt() { rm -f "$bin/apt-get" "$bin/dpkg"; }
free_kb() { stub df "printf 'Filesystem 1024-blocks Used Available Capacity Mounted on\nstub 999999999 0 $1 1%% /stubfs\n'"; }

# run SCRIPT ARGS...: the script with nothing but the stub PATH; sets out and rc.
run() {
  rc=0
  out=$(env -i HOME="$tmp/home" PATH="$bin" SPECULA_PREFLIGHT_TEST=1 SPECULA_MODELS_DIR="$tmp/models" \
    CARGO_TARGET_DIR="$tmp/target" "$root/$@" 2>&1) || rc=$?
}

# check TEST...: counts it; a failure prints the case, its exit status and its output.
check() {
  cases=$((cases + 1))
  if "$@"; then return; fi
  failed=$((failed + 1))
  printf 'FAIL %s\n  rc=%s, output:\n%s\n' "$name" "$rc" "$(sed 's/^/  | /' <<<"$out")"
  return 1
}

# expect NAME TEST...: a check of its own.
expect() {
  name=$1
  shift
  if check "$@"; then echo "ok   $name"; fi
}

lines() { [ -z "$out" ] && echo 0 || wc -l <<<"$out"; }

# expect_error NAME MODE LINE_PREFIX: exit 1 and exactly one line, starting with LINE_PREFIX.
expect_error() {
  name=$1
  run scripts/preflight.sh "$2"
  if check test "$rc" = 1 -a "$(lines)" = 1 -a "${out#"$3"}" != "$out"; then echo "ok   $name: $out"; fi
}

expect_ok() {
  name=$1
  run scripts/preflight.sh "$2"
  local last
  last=$(tail -n1 <<<"$out")
  if check test "$rc" = 0 -a "${last#"preflight ok ($2): "}" != "$last"; then echo "ok   $name: $last"; fi
}

# expect_errors NAME MODE COUNT: exit 1 with COUNT lines, each an error.
expect_errors() {
  name=$1
  run scripts/preflight.sh "$2"
  if check test "$rc" = 1 -a "$(lines)" = "$3" -a "$(grep -vc '^error: ' <<<"$out" || true)" = 0; then
    echo "ok   $name: $3 lines, each an error"
  fi
}

for mode in app cli test; do reset; expect_ok "all present ($mode)" $mode; done

reset; rm "$bin/cargo"; expect_error "cargo missing" app "error: cargo is missing: install Rust $need or later"
reset; rm "$bin/rustc"; expect_error "rustc missing" cli "error: rustc is missing: install Rust $need or later"
reset; stub cargo "echo 'cargo 1.70.0 (stub)'"; expect_error "cargo too old" cli "error: cargo 1.70.0 is too old: the workspace needs Rust $need or later"
reset; stub cargo "echo 'cargo 0.66.0'"; expect_error "Debian's cargo 0.66" app "error: cargo 0.66.0 is too old"
reset; stub rustc "echo 'rustc 1.63.0'"; expect_error "rustc too old" test "error: rustc 1.63.0 is too old"
reset; rm "$bin/node"; expect_error "node missing" app "error: node is missing: install Node 20.19+"
reset; stub node "echo v18.19.0"; expect_error "Debian's node 18" app "error: node 18.19.0 is too old: Vite needs 20.19 or later; install Node 20.19+"
reset; stub node "echo v20.18.1"; expect_error "node 20.18" test "error: node 20.18.1 is too old"
reset; stub node "echo v22.5.1"; expect_error "node 22.5 (Vite needs 22.12+)" app "error: node 22.5.1 is not supported by Vite"
reset; stub node "echo v22.12.0"; expect_ok "node 22.12" app
reset; rm "$bin/npm"; expect_error "npm missing" app "error: npm is missing"
reset; rm "$bin/node" "$bin/npm"; expect_ok "cli needs no node" cli
reset; no_apt; rm "$bin/python3"; expect_error "python3 missing, no apt" cli "error: python3 is missing"
reset; no_apt; rm "$state/pip-ok"; expect_error "pip missing, no apt" cli "error: pip is missing"
reset; no_apt; rm "$bin/pip"; expect_error "no pip command, no apt" cli "error: no pip command on PATH"
reset; no_apt; expect_error "test off Debian" test "error: scripts/test.sh needs Debian or Ubuntu"
reset; no_apt; rm "$state/venv-ok"; expect_errors "test off Debian, no venv" test 2
reset; no_apt; expect_error "app off Debian, no WebKitGTK" app "error: no apt-get/dpkg here: install by hand the system packages scripts/install-deps.sh lists"
reset; no_apt; stub pkg-config "exit 0"; expect_ok "app off Debian, WebKitGTK installed by hand" app
expect "  with a note" grep -q '^note: no apt-get/dpkg: the system packages in scripts/install-deps.sh must be installed by hand' <<<"$out"

# apt installs what python3 lacks (after an update), and only when nothing else is wrong.
reset; rm "$state/pip-ok" "$bin/pip"; expect_ok "pip installed with apt" app
expect "  apt-get update, then install python3-pip" test "$(cat "$state/apt.log")" = $'update -qq\ninstall -y -qq --no-install-recommends python3-pip'
reset; rm "$state/pip-ok" "$state/venv-ok"; expect_ok "pip and venv installed with apt" test
expect "  apt-get install python3-pip python3-venv" grep -qx 'install -y -qq --no-install-recommends python3-pip python3-venv' "$state/apt.log"
reset; rm "$state/pip-ok" "$bin/cargo"; expect_errors "pip missing and cargo missing: no apt" app 2
expect "  apt-get not run" test ! -e "$state/apt.log"
reset; rm "$state/pip-ok"; stub apt-get "exit 0"; name="apt did not bring pip"; run scripts/preflight.sh cli
if check test "$rc" = 1 -a "$out" = "installing python3-pip
error: python3 still lacks python3-pip after apt-get installed it: put Debian's /usr/bin/python3 (or one with pip and venv) first on PATH"; then
  echo "ok   $name: $(tail -n1 <<<"$out")"
fi

# Disk: the models (less those cached) and the build, summed on one filesystem.
reset; free_kb 3000000; expect_error "3 GB free" app "error: 3.0 GB free on /stubfs, 8.2 GB needed (models 2.2 GB + build 6.0 GB)"
reset; free_kb 6815744; expect_error "7 GB free, no models" app "error: 6.9 GB free on /stubfs"
reset; free_kb 6815744; mkdir -p "$tmp/models"
truncate -s 1117320768 "$tmp/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
truncate -s 491400064 "$tmp/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
expect_ok "7 GB free, models cached" app
reset; free_kb 11000000; expect_error "11 GB free for test" test "error: 11.2 GB free on /stubfs, 12.2 GB needed (models 2.2 GB + build 10.0 GB)"

# Everything wrong at once: every problem listed, one line each.
reset; no_apt; rm "$bin/cargo" "$state/pip-ok"; stub node "echo v18.19.0"; free_kb 1000
expect_errors "five problems" app 5

# The scripts that download stop at the preflight: the stub pip marks any download.
reset; run scripts/fetch-models.sh smollm
expect "the marker catches a download (fetch-models.sh alone)" test -e "$state/downloaded"
for script in "scripts/run.sh" "scripts/run.sh --cli" "scripts/test.sh"; do
  # shellcheck disable=SC2086 # the script's arguments
  reset; rm "$bin/cargo"; run $script
  name="$script, cargo missing"
  if check test "$rc" = 1 -a ! -e "$state/downloaded" -a "$(lines)" = 1 -a ! -e "$tmp/models"; then
    echo "ok   $name: stopped before any download: $out"
  fi
done

echo "preflight-test: $((cases - failed)) of $cases checks passed"
[ "$failed" -eq 0 ]
