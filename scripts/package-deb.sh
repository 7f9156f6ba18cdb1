#!/usr/bin/env bash
# The desktop app as a Debian package, offline (Tauri's bundler writes the .deb itself): the app
# (/usr/bin/specula-app), the `specula` CLI (/usr/bin/specula), the icons, a desktop entry and the
# dependencies (WebKitGTK, GTK); the version is the workspace's. Prints the package's path.
#   scripts/package-deb.sh           release build (about 20 minutes from nothing on 2 cores)
#   scripts/package-deb.sh --debug   packages the debug build the tests already made, without
#                                    rebuilding it (scripts/test.sh installs and tests that one)
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
profile=release
[ "${1:-}" = "--debug" ] && profile=debug

scripts/install-deps.sh --app-only
[ -x ui/node_modules/.bin/tauri ] || (cd ui && npm ci --no-audit --no-fund)
# The CLI goes into the same package; its path is only known here, so it is passed as config.
cli_config="{\"bundle\":{\"linux\":{\"deb\":{\"files\":{\"/usr/bin/specula\":\"$target_dir/$profile/specula\"}}}}}"
if [ "$profile" = release ]; then
    cargo build --release -p specula-cli >&2
    ui/node_modules/.bin/tauri build --no-bundle --ci >&2
    # The release profile keeps debug info for profiling; the package ships without it.
    strip "$target_dir/release/specula" "$target_dir/release/specula-app"
    ui/node_modules/.bin/tauri bundle --bundles deb --ci --config "$cli_config" >&2
else
    [ -x "$target_dir/debug/specula-app" ] && [ -x "$target_dir/debug/specula" ] ||
        { echo "no debug build in $target_dir: run cargo build --workspace --bins first" >&2; exit 1; }
    ui/node_modules/.bin/tauri bundle --debug --bundles deb --ci --config "$cli_config" >&2
fi
ls -t "$target_dir/$profile/bundle/deb/"*.deb | head -n1
