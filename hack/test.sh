#!/usr/bin/env bash
# The project's test command: the layout's rules, formatting, lints, unit tests, and the
# real-apiserver tier.
# Brings up (and, the first time, builds) the local kube-apiserver, and a throw-away
# PostgreSQL; a missing one fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

hack/install-prerequisites.sh --tests

# The node tier (tests/node, a real kubelet and containerd) runs when this machine can run a
# node; CI demands it. WSYNC_NODE=0 leaves it out on a developer's machine.
node_tier=0
if [ "${CI:-}" = true ] || [ "${WSYNC_NODE:-}" = 1 ]; then
  hack/local-node.sh allowed || { echo "error: the node tier is demanded (CI=true or WSYNC_NODE=1), and this machine cannot run a node" >&2; exit 1; }
  node_tier=1
elif [ "${WSYNC_NODE:-}" != 0 ] && hack/local-node.sh allowed 2>/dev/null; then
  node_tier=1
else
  echo "note: the node tier does not run here (hack/local-node.sh allowed says why)" >&2
fi
# The cluster's first build then builds the node's kubelet and kube-scheduler in the same tree.
[ "$node_tier" = 0 ] || export WSYNC_NODE=1

# Stop what this run started, and only that.
cleanup=()
trap 'for c in "${cleanup[@]}"; do $c || true; done' EXIT
if ! hack/local-cluster.sh status; then
  hack/local-cluster.sh up
  cleanup+=("hack/local-cluster.sh down")
fi
eval "$(hack/local-cluster.sh env)"
if ! eval "$(hack/local-postgres.sh env)" || ! psql "$WSYNC_TEST_POSTGRES_URL" -c 'select 1' >/dev/null 2>&1; then
  hack/local-postgres.sh up
  cleanup+=("hack/local-postgres.sh down")
fi
eval "$(hack/local-postgres.sh env)"

echo "== layout (docs/ARCHITECTURE.md)"
python3 hack/check-layout.py
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy -D warnings"
cargo clippy --all-targets --test node --locked -- -D warnings
echo "== cargo test"
# A real node would run the Pods the apiserver tier leaves to its kubelet stand-in.
if hack/local-node.sh status 2>/dev/null; then
  echo "error: the local node is up; stop it (hack/local-node.sh down): WSYNC_NODE=1 runs the node tier after the others" >&2
  exit 1
fi
# The upgrade test's previous release (tests/front_door/upgrades.rs), built once into the
# cache before the tests run, not under them.
hack/previous-release.sh >/dev/null
cargo test --all-targets --locked --no-fail-fast

# The node tier wants a real kubelet, which would also run the Pods the apiserver tier leaves to
# its kubelet stand-in: so it runs after, on its own (Cargo.toml: test = false).
if [ "$node_tier" = 1 ]; then
  echo "== the node tier (hack/local-node.sh, tests/node)"
  # Down before the cluster it runs against.
  cleanup=("hack/local-node.sh down" "${cleanup[@]}")
  hack/local-node.sh up
  cargo test --locked --test node
  # The tunnel's benchmark needs a real Pod: its smoke pass (few samples, no speed asserted).
  WSYNC_BENCH_PARTS=tunnel cargo test --locked --bench scale
fi
