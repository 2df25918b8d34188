#!/usr/bin/env bash
# End to end on kind: a real cluster with a real kubelet. Needs Docker and kind; not run in CI
# here (these machines have no Docker engine).
#
#   e2e/kind.sh          create the cluster, build and load the image, install, run a workspace
#                        through its life, tear everything down
#   KEEP=1 e2e/kind.sh   leave the cluster up afterwards
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in docker kind kubectl cargo; do
  command -v "$tool" >/dev/null || { echo "e2e/kind.sh needs $tool on PATH; install it first" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { echo "e2e/kind.sh needs a running Docker engine" >&2; exit 2; }

cluster=wsync-e2e
image=wsync:e2e
work=$(mktemp -d)
cleanup() {
  [ -n "${cp_pid:-}" ] && kill "$cp_pid" 2>/dev/null || true
  [ -z "${KEEP:-}" ] && kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }

step "Creating kind cluster $cluster"
kind create cluster --name "$cluster" --wait 120s
export KUBECONFIG="$work/kubeconfig"
kind get kubeconfig --name "$cluster" >"$KUBECONFIG"

step "Building and loading $image"
docker build -t "$image" .
kind load docker-image "$image" --name "$cluster"
cargo build -q --bin wsync

step "Starting the control plane on the host (the agent reaches it through the Docker bridge)"
host_ip=$(docker network inspect kind -f '{{(index .IPAM.Config 0).Gateway}}')
target/debug/wsync control-plane --listen "0.0.0.0:18080" --database-url "sqlite://$work/cp.db" \
  --partial-reconciliation-interval-seconds 2 >"$work/cp.log" 2>&1 &
cp_pid=$!
export WSYNC_SERVER=http://127.0.0.1:18080 WSYNC_AGENT_ID=e2e
sleep 1
token=$(target/debug/wsync agents register e2e -o json | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')

step "Installing wsync with kubectl apply -k manifests/"
kubectl apply -k manifests/
kubectl -n wsync-system create secret generic wsync-agent-token --from-literal=token="$token"
kubectl -n wsync-system set image deployment/wsync-agent agent="$image"
kubectl -n wsync-system set env deployment/wsync-agent WSYNC_AGENT_ID=e2e \
  WSYNC_CONTROL_PLANE_URL="http://$host_ip:18080" WSYNC_ALLOW_INSECURE_CONTROL_PLANE=true
kubectl -n wsync-system rollout status deployment/wsync-agent --timeout=180s

wait_for() {
  for _ in $(seq 1 180); do
    target/debug/wsync workspaces get alice -o json | grep -q "\"actual_state\": \"$1\"" && return 0
    sleep 1
  done
  echo "alice never became $1" >&2; kubectl -n wsync-system logs deployment/wsync-agent --tail=50 >&2; exit 1
}

step "A workspace's life with real pods"
# pause stays up without a command; busybox would exit and crash-loop.
target/debug/wsync workspaces create alice --image registry.k8s.io/pause:3.9
wait_for Running
target/debug/wsync workspaces stop alice >/dev/null && wait_for Stopped
target/debug/wsync workspaces start alice >/dev/null && wait_for Running
target/debug/wsync workspaces terminate alice >/dev/null && wait_for Terminated
kubectl -n wsync-system get wss
step "e2e passed"
