#!/usr/bin/env bash
# scripts/run.sh and scripts/test.sh on a bare Debian 12 (a debootstrap chroot), given one
# prerequisite more at each step: each run must stop at the preflight with one line per problem
# naming its fix, before any model is downloaded. Prints a transcript in Markdown (its last
# run is in docs/hostile-input.md). Needs root, debootstrap and the Debian mirror; the Rust
# toolchain (~/.rustup, ~/.cargo) and Node (/usr/bin/node, /usr/lib/node_modules/npm) are this
# machine's, bound into the chroot read-only; apt installs Debian's Node 18 and python3-pip
# inside it. Not a CI step (root, mounts, ~300 MB of packages).
#
#   scripts/preflight-chroot.sh [DIR]     # DIR: the chroot, made afresh (default /tmp/specula-chroot)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jail=${1:-/tmp/specula-chroot}
[ "$(id -u)" -eq 0 ] || { echo "run as root (chroot and mounts)" >&2; exit 2; }
# Afresh each run (an earlier one installed packages into it); never while something is
# mounted inside: removing it would reach into the bound host folders.
if grep -q " $jail/" /proc/mounts; then
  echo "$jail still has mounts inside (an interrupted run?): umount them first" >&2
  exit 1
fi
rm -rf "$jail"
debootstrap --variant=minbase bookworm "$jail" http://deb.debian.org/debian >/dev/null

mounts=()
bind() { # bind SOURCE TARGET [ro]
  [ -d "$1" ] && mkdir -p "$2" || { mkdir -p "$(dirname "$2")" && touch "$2"; }
  mount --bind "$1" "$2"
  [ "${3:-}" != ro ] || mount -o remount,bind,ro "$2"
  mounts+=("$2")
}
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mkdir -p "$jail/proc" && mount -t proc proc "$jail/proc" && mounts+=("$jail/proc")
bind /dev "$jail/dev"
bind /dev/pts "$jail/dev/pts"
cp /etc/resolv.conf "$jail/etc/resolv.conf"
rm -rf "$jail/root/specula" "$jail/root/.cache"
git clone -q "$root" "$jail/root/specula"

base=/usr/sbin:/usr/bin:/sbin:/bin
step() { # step TITLE PATH COMMAND
  local out status=0 models
  out=$(chroot "$jail" /usr/bin/env -i HOME=/root PATH="$2" TERM=dumb bash -c "cd /root/specula && $3" 2>&1) || status=$?
  models=$({ find "$jail/root/.cache/specula/models" -type f 2>/dev/null || true; } | wc -l)
  printf '### %s\n\n    $ %s\n' "$1" "$3"
  sed 's/^/    /' <<<"$out" | tail -n 12
  printf '\n    (exit %d; model files downloaded: %d)\n\n' "$status" "$models"
}

step "Bare Debian 12: no Rust, no Node, no pip" "$base" "scripts/run.sh"
step "Bare Debian 12, the test command" "$base" "scripts/test.sh"

bind "$HOME/.rustup" "$jail/root/.rustup" ro
bind "$HOME/.cargo/bin" "$jail/root/.cargo/bin" ro
rust=/root/.cargo/bin:$base
step "With Rust (rustup's 1.95)" "$rust" "scripts/run.sh"

chroot "$jail" /usr/bin/env -i PATH="$base" DEBIAN_FRONTEND=noninteractive \
  bash -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs >/dev/null"
step "With Rust and Debian's Node 18 (apt nodejs, no npm)" "$rust" "scripts/run.sh"

bind /usr/bin/node "$jail/opt/node/bin/node" ro
bind /usr/lib/node_modules/npm "$jail/opt/node/lib/node_modules/npm" ro
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$jail/opt/node/bin/npm"
node=/opt/node/bin:$rust
# A models folder on a 64 MB filesystem: the disk check must stop it, pip still missing.
mkdir -p "$jail/root/.cache/specula/models" && mount -t tmpfs -o size=64m tmpfs "$jail/root/.cache" && mounts+=("$jail/root/.cache")
step "With Rust and Node 20, a 64 MB disk for the models, no pip" "$node" "scripts/run.sh --cli"
umount "$jail/root/.cache" && unset 'mounts[${#mounts[@]}-1]'
step "With Rust and Node 20, room on disk: the preflight installs python3-pip itself" "$node" "scripts/preflight.sh app"
