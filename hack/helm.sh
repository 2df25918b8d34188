#!/usr/bin/env bash
# Render or lint a Helm chart with Helm v4's own Go SDK, through the PyPI package
# helm-python-sdk (no helm binary is packaged for these machines), installed once into the
# cache. Usage: hack/helm.sh render CHART VALUES_JSON NAMESPACE | hack/helm.sh lint CHART VALUES_JSON
set -euo pipefail
VERSION=0.2.2
CACHE_DIR=${WSYNC_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wsync/helm-python-sdk-$VERSION}
if [ ! -d "$CACHE_DIR/helm_python" ]; then
  mkdir -p "$(dirname "$CACHE_DIR")"
  # Tests call this in parallel: one installs, the others wait for it.
  exec 9>"$CACHE_DIR.lock"
  flock 9
  if [ ! -d "$CACHE_DIR/helm_python" ]; then
    rm -rf "$CACHE_DIR.tmp"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
      --target "$CACHE_DIR.tmp" "helm-python-sdk==$VERSION" >&2
    rm -rf "$CACHE_DIR" && mv "$CACHE_DIR.tmp" "$CACHE_DIR"
  fi
  flock -u 9
fi
PYTHONPATH="$CACHE_DIR" exec python3 "$(dirname "$0")/helm-chart.py" "$@"
