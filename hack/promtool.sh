#!/usr/bin/env bash
# Print the path of a promtool, fetched once from Debian's `prometheus` package into the cache.
# Only the one binary is unpacked: installing the package would also install (and, on some
# machines, start) a Prometheus server.
set -euo pipefail
if command -v promtool >/dev/null; then command -v promtool; exit 0; fi
CACHE_DIR=${WSYNC_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wsync/promtool}
if [ ! -x "$CACHE_DIR/promtool" ]; then
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.lock"
  flock 9
  if [ ! -x "$CACHE_DIR/promtool" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; })
    dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$work" ./usr/bin/promtool
    mv "$work/usr/bin/promtool" "$CACHE_DIR/promtool.tmp" && mv "$CACHE_DIR/promtool.tmp" "$CACHE_DIR/promtool"
  fi
  flock -u 9
fi
echo "$CACHE_DIR/promtool"
