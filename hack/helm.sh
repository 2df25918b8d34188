#!/usr/bin/env bash
# Render or lint a Helm chart with Helm v4's own Go SDK, through the PyPI package
# helm-python-sdk (no helm binary is packaged for these machines), installed once into the
# cache. Usage: hack/helm.sh render|render-for-cluster CHART VALUES_JSON NAMESPACE | hack/helm.sh lint CHART VALUES_JSON
#   | hack/helm.sh install|uninstall CHART VALUES_JSON NAMESPACE RELEASE (into $KUBECONFIG's cluster)
set -euo pipefail
VERSION=0.2.2
# helm_python_sdk-0.2.2-py3-none-manylinux_2_28_x86_64.whl, the wheel for these machines.
WHEEL_SHA256=28cc13abaf134c3a7e37f070c939be8d9cdc9825c3c8b8b2d35161073bcd4578
CACHE_DIR=${WSYNC_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wsync/helm-python-sdk-$VERSION}
if [ ! -d "$CACHE_DIR/helm_python" ]; then
  mkdir -p "$(dirname "$CACHE_DIR")"
  # Tests call this in parallel: one installs, the others wait for it.
  exec 9>"$CACHE_DIR.lock"
  flock 9
  if [ ! -d "$CACHE_DIR/helm_python" ]; then
    rm -rf "$CACHE_DIR.tmp"
    # Pinned by hash: the wheel carries a native library (Helm's Go SDK).
    echo "helm-python-sdk==$VERSION --hash=sha256:$WHEEL_SHA256" >"$CACHE_DIR.requirements"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --require-hashes \
      --only-binary=:all: --target "$CACHE_DIR.tmp" -r "$CACHE_DIR.requirements" >&2
    rm -rf "$CACHE_DIR" && mv "$CACHE_DIR.tmp" "$CACHE_DIR"
  fi
  flock -u 9
fi
PYTHONPATH="$CACHE_DIR" exec python3 "$(dirname "$0")/helm-chart.py" "$@"
