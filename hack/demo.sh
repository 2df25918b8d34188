#!/usr/bin/env bash
# The local demo: a real kube-apiserver and controller manager, the wsync agent, a scripted
# control plane, and a sample workspace. It leaves nothing running when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

hack/install-prerequisites.sh
started_cluster=0
if ! hack/local-cluster.sh status; then
  step "Starting a local kube-apiserver (built from Debian's packages the first time: ~10 min)"
  hack/local-cluster.sh up
  started_cluster=1
fi
eval "$(hack/local-cluster.sh env)"

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  kubectl delete namespace demo-ws-1 --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl -n wsync-system delete wss demo --ignore-not-found >/dev/null 2>&1 || true
  [ "$started_cluster" = 1 ] && hack/local-cluster.sh down
  rm -rf "$work"
}
trap cleanup EXIT

step "Building wsync"
cargo build -q --bin wsync --example demo_control_plane

step "Installing the WorkspaceSyncStatus CRD"
kubectl apply -k crds/
kubectl wait --for=condition=Established crd/workspacesyncstatuses.wsync.dev --timeout=30s >/dev/null
kubectl create namespace wsync-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null

step "Starting a scripted control plane (it hands every workspace an inventory, a ConfigMap and a Service)"
target/debug/examples/demo_control_plane >"$work/control-plane.url" 2>"$work/control-plane.log" &
pids+=($!)
for _ in $(seq 1 50); do [ -s "$work/control-plane.url" ] && break; sleep 0.1; done
url=$(cat "$work/control-plane.url")
echo "listening on $url"

step "Creating a sample workspace: Deployment demo-ws-1/ws-1, labelled agent.gitlab.com/id=demo"
kubectl create namespace demo-ws-1 --dry-run=client -o yaml \
  | kubectl label --local -f - agent.gitlab.com/id=demo -o yaml | kubectl apply -f - >/dev/null
kubectl -n demo-ws-1 create deployment ws-1 --image=busybox:1.36 --dry-run=client -o yaml \
  | kubectl label --local -f - agent.gitlab.com/id=demo -o yaml | kubectl apply -f -

step "Starting the agent"
echo demo-token >"$work/token"
target/debug/wsync agent --agent-id demo --namespace wsync-system --control-plane-url "$url" \
  --token-file "$work/token" >"$work/agent.log" 2>&1 &
pids+=($!)
kubectl -n wsync-system wait --for=condition=Ready wss/demo --timeout=60s >/dev/null 2>&1 \
  || { sleep 2; kubectl -n wsync-system wait --for=condition=Ready wss/demo --timeout=60s; }
kubectl -n wsync-system get wss demo

step "What the control plane heard: a full sync first"
head -3 "$work/control-plane.log"

step "The config the control plane returned, applied by the agent with server-side apply"
sleep 1
kubectl -n demo-ws-1 get configmap,service

step "Scaling the workspace to 0: the change reaches the control plane in a prompt partial sync"
mark=$(wc -l <"$work/control-plane.log")
kubectl -n demo-ws-1 scale deployment/ws-1 --replicas=0
sleep 3
tail -n +"$((mark + 1))" "$work/control-plane.log" | grep -v '\[\]' | head -3 || true

step "Requesting a full resync with an annotation"
mark=$(wc -l <"$work/control-plane.log")
kubectl -n wsync-system annotate wss/demo wsync.dev/resync-requested="$(date +%s)" --overwrite
sleep 2
tail -n +"$((mark + 1))" "$work/control-plane.log" | grep full | head -1 || true
kubectl -n wsync-system get wss demo

step "Done; stopping everything"
