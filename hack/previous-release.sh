#!/usr/bin/env bash
# The wsync binary of the release before the schema's last change, built once from its commit
# into the cache, for the upgrade test (tests/front_door/upgrades.rs): an old replica and a new
# one on one PostgreSQL. Prints the binary's path. Bump RELEASE when a release ships.
set -euo pipefail
cd "$(dirname "$0")/.."
# The last commit before #41's migration 0011 (agents.last_seen_at).
RELEASE=ac49bb313cf2b04670b2e60de3dd57a3f19fa6fd
CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/wsync/previous-release/$RELEASE
if [ ! -x "$CACHE_DIR/wsync" ]; then
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR.lock"
  flock 9
  if [ ! -x "$CACHE_DIR/wsync" ]; then
    git cat-file -e "$RELEASE^{commit}" 2>/dev/null \
      || { echo "error: commit $RELEASE is not in this clone (a shallow one?): git fetch --unshallow" >&2; exit 1; }
    echo "building wsync at ${RELEASE:0:12}, the previous release, into $CACHE_DIR (once; a few minutes)" >&2
    rm -rf "$CACHE_DIR/src" && mkdir -p "$CACHE_DIR/src"
    git archive "$RELEASE" | tar -x -C "$CACHE_DIR/src"
    # Its own target directory, removed after: only the binary is kept. No jemalloc: a test
    # binary, and its C build is the slowest part.
    (cd "$CACHE_DIR/src" && CARGO_TARGET_DIR="$CACHE_DIR/target" cargo build --locked --quiet --no-default-features --bin wsync)
    cp "$CACHE_DIR/target/debug/wsync" "$CACHE_DIR/wsync.tmp" && mv "$CACHE_DIR/wsync.tmp" "$CACHE_DIR/wsync"
    rm -rf "$CACHE_DIR/src" "$CACHE_DIR/target"
  fi
  flock -u 9
fi
echo "$CACHE_DIR/wsync"
