#!/usr/bin/env bash
# The local demo: a real kube-apiserver and controller manager, the wsync control plane on
# SQLite, the wsync agent, and a sample workspace taken through its life. It leaves nothing
# running when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }

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
  kubectl delete namespace -l agent.gitlab.com/id=demo --wait=false >/dev/null 2>&1 || true
  kubectl -n wsync-system delete wss demo --ignore-not-found >/dev/null 2>&1 || true
  if [ "$started_cluster" = 1 ]; then hack/local-cluster.sh down; fi
  rm -rf "$work"
}
trap cleanup EXIT

step "Building wsync"
cargo build -q --bin wsync --example kubelet_standin
wsync=target/debug/wsync
port=18480
export WSYNC_SERVER=http://127.0.0.1:$port WSYNC_AGENT_ID=demo

step "Installing the WorkspaceSyncStatus CRD"
kubectl apply -k crds/
kubectl wait --for=condition=Established crd/workspacesyncstatuses.wsync.dev --timeout=30s >/dev/null
kubectl create namespace wsync-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null

step "Starting the control plane (SQLite at $work/control-plane.db)"
$wsync control-plane --listen "127.0.0.1:$port" --database-url "sqlite://$work/control-plane.db" \
  --partial-reconciliation-interval-seconds 2 >"$work/control-plane.out" 2>"$work/control-plane.log" &
pids+=($!)
for _ in $(seq 1 50); do curl -fs "$WSYNC_SERVER/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
# On its first start the control plane makes an admin token and prints it, once.
WSYNC_ADMIN_TOKEN=$(sed -n 's/^admin token.*: //p' "$work/control-plane.out")
export WSYNC_ADMIN_TOKEN
say "listening on $WSYNC_SERVER; it printed its admin token on first start: $WSYNC_ADMIN_TOKEN"
say "sign in at $WSYNC_SERVER/sign-in?next=/agents/demo with that token to see the page"

step "Registering an agent; the control plane answers with its token, once"
$wsync agents register demo -o json | sed -n 's/.*"token":"\([^"]*\)".*/\1/p' >"$work/token"
say "token saved to $work/token"

step "Starting the agent, and a kubelet stand-in (this cluster has no kubelet: it marks Pods Ready)"
$wsync agent --agent-id demo --namespace wsync-system --control-plane-url "$WSYNC_SERVER" \
  --token-file "$work/token" >"$work/agent.log" 2>&1 &
pids+=($!)
target/debug/examples/kubelet_standin agent.gitlab.com/id=demo >"$work/kubelet.log" 2>&1 &
pids+=($!)

wait_for() {
  local want=$1
  for _ in $(seq 1 120); do
    if $wsync workspaces get alice -o json 2>/dev/null | grep -q "\"actual_state\": \"$want\""; then return 0; fi
    sleep 1
  done
  echo "timed out waiting for alice to be $want; agent log:" >&2
  tail -20 "$work/agent.log" >&2
  return 1
}

step "Creating workspace alice"
$wsync workspaces create alice --image busybox:1.36 --cpu 100m --memory 64Mi
wait_for Running
$wsync workspaces list
echo
kubectl -n wsync-system get wss demo
echo
kubectl -n wsync-demo-alice get deployment,service,pvc,serviceaccount,configmap,networkpolicy

step "Stopping alice: the agent scales it to 0 and reports it Stopped"
$wsync workspaces stop alice >/dev/null
wait_for Stopped
$wsync workspaces list

step "Terminating alice: the agent deletes its namespace and reports Terminating, then Terminated"
$wsync workspaces terminate alice >/dev/null
wait_for Terminated
$wsync workspaces list
kubectl get namespace wsync-demo-alice 2>&1 | sed 's/^/   /' || true
echo
kubectl -n wsync-system get wss demo

step "Done; stopping everything"
