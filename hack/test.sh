#!/usr/bin/env bash
# The project's test command: formatting, lints, unit tests, and the real-apiserver tier.
# Brings up (and, the first time, builds) the local kube-apiserver; a missing one fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

hack/install-prerequisites.sh

# Stop the cluster afterwards only if this run started it.
if ! hack/local-cluster.sh status; then
  hack/local-cluster.sh up
  trap 'hack/local-cluster.sh down' EXIT
fi
eval "$(hack/local-cluster.sh env)"

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy -D warnings"
cargo clippy --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --all-targets --locked --no-fail-fast
