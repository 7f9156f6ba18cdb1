#!/usr/bin/env bash
# System packages the app and the tests need, installed only when missing: Tauri's WebKitGTK
# stack, Xvfb and WebKitWebDriver (the app's end-to-end test) and Debian's chromium (the
# browser test; nothing downloads a browser). Then tauri-driver, built once into
# ~/.cache/specula/tools. `--app-only` skips the test tools.
set -euo pipefail

packages=(libwebkit2gtk-4.1-dev libgtk-3-dev librsvg2-dev libayatana-appindicator3-dev pkg-config)
# x11-apps and netpbm: screenshots of the app's window under Xvfb (xwd, xwdtopnm, pnmtopng).
[ "${1:-}" = "--app-only" ] || packages+=(xvfb xauth webkit2gtk-driver chromium python3-venv x11-apps netpbm)

missing=()
if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    echo "no apt-get/dpkg: install these (or your system's equivalents) by hand: ${packages[*]}" >&2
    packages=()
fi
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "${1:-}" = "--app-only" ] && exit 0
tools="$HOME/.cache/specula/tools"
if [ ! -x "$tools/bin/tauri-driver" ]; then
    cargo install tauri-driver --version 2.1.0 --locked --root "$tools"
fi
