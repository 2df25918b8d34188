#!/usr/bin/env bash
# Run a wsync agent under heaptrack, for the scale benchmark or the tests:
#   WSYNC_AGENT_WRAPPER=hack/heaptrack-agent.sh WSYNC_BENCH_SIZES=1000 cargo bench --bench scale
# Profiles land in ${WSYNC_HEAPTRACK_DIR:-/tmp/wsync-heaptrack}/agent.<pid>.zst; read one with
# `heaptrack_print -f FILE --print-peaks 1` (or --print-leaks 1 after a kill -9: the live heap).
# SIGTERM is passed to the agent itself, so that it releases its Lease as it would unwrapped.
set -euo pipefail
dir="${WSYNC_HEAPTRACK_DIR:-/tmp/wsync-heaptrack}"
mkdir -p "$dir"
heaptrack -o "$dir/agent.$$" "$@" &
profiler=$!
trap 'pkill -TERM -P "$profiler" -f "wsync agent" || true' TERM
wait "$profiler" || wait "$profiler"
