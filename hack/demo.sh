#!/usr/bin/env bash
# The local demo: a real kube-apiserver and controller manager, the wsync control plane on
# SQLite, the wsync agent, and a sample workspace taken through its life. It leaves nothing
# running when it exits, unless given --keep: then the cluster, the control plane, the agent
# and a running workspace stay, to explore, and it prints how to stop them.
# Wherever this machine can run a node (hack/local-node.sh allowed: root, cgroup v1), the
# workspace's Pod really runs, on a real kubelet and containerd; --no-node (or a machine that
# cannot) uses a kubelet stand-in that marks Pods Ready, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0 node=auto
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --node) node=1 ;;
    --no-node) node=0 ;;
    *) echo "usage: hack/demo.sh [--keep] [--no-node]" >&2; exit 2 ;;
  esac
done

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
if [ "$node" = auto ]; then
  if why=$(hack/local-node.sh allowed 2>&1); then node=1; else
    node=0
    say "no real node here (${why:-this machine cannot run one}): a kubelet stand-in will mark Pods Ready"
  fi
fi
started_node=0
if [ "$node" = 1 ] && ! hack/local-node.sh status; then
  step "Starting a local node: kubelet and containerd (kubelet built the first time: ~4 min)"
  hack/local-node.sh up
  started_node=1
fi
hack/local-node.sh status && node=1

work=$(mktemp -d)
pids=()
# What stops the demo: run at exit, or, with --keep, written to $work/stop.sh for later.
write_stop() {
  cat >"$work/stop.sh" <<STOP
#!/usr/bin/env bash
# Stop what hack/demo.sh started, and only that.
cd "$PWD"
eval "\$(hack/local-cluster.sh env)"
for pid in ${pids[*]}; do kill "\$pid" 2>/dev/null || true; done
# An agent still shutting down would write its WorkspaceSyncStatus again.
for pid in ${pids[*]}; do
  for _ in \$(seq 1 100); do kill -0 "\$pid" 2>/dev/null || break; sleep 0.1; done
done
kubectl delete namespace -l agent.gitlab.com/id=demo --wait=false >/dev/null 2>&1 || true
kubectl -n wsync-system delete wss demo --ignore-not-found >/dev/null 2>&1 || true
$([ "$started_node" = 1 ] && echo "hack/local-node.sh down")
$([ "$started_cluster" = 1 ] && echo "hack/local-cluster.sh down")
rm -rf "$work"
STOP
  chmod +x "$work/stop.sh"
}
cleanup() {
  if [ "$keep" = 1 ] && [ "${finished:-0}" = 1 ]; then return; fi
  write_stop
  "$work/stop.sh"
}
trap cleanup EXIT
# With --keep, the background processes outlive this script (and its terminal).
background() { if [ "$keep" = 1 ]; then setsid "$@" & else "$@" & fi; pids+=($!); }

step "Building wsync"
cargo build -q --bin wsync --bin kubectl-wsync --example kubelet_standin
wsync=target/debug/wsync
port=18480
export WSYNC_SERVER=http://127.0.0.1:$port WSYNC_AGENT_ID=demo

step "Installing the WorkspaceSyncStatus CRD"
kubectl apply -k crds/
kubectl wait --for=condition=Established crd/workspacesyncstatuses.wsync.dev --timeout=30s >/dev/null
kubectl create namespace wsync-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null

step "Starting the control plane (SQLite at $work/control-plane.db)"
# Each workspace port on a host of its own under ws.localhost, which browsers and curl resolve
# to this machine: no DNS to set up.
background $wsync control-plane --listen "127.0.0.1:$port" --database-url "sqlite://$work/control-plane.db" \
  --partial-reconciliation-interval-seconds 2 --workspaces-domain ws.localhost \
  >"$work/control-plane.out" 2>"$work/control-plane.log"
for _ in $(seq 1 50); do curl -fs "$WSYNC_SERVER/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
# On its first start the control plane makes an admin token and prints it, once.
WSYNC_ADMIN_TOKEN=$(sed -n 's/^admin token.*: //p' "$work/control-plane.out")
export WSYNC_ADMIN_TOKEN
say "listening on $WSYNC_SERVER; it printed its admin token on first start: $WSYNC_ADMIN_TOKEN"
say "sign in at $WSYNC_SERVER/sign-in with that token to see the page"

step "Registering an agent; the control plane answers with its token, once"
$wsync agents register demo -o json | sed -n 's/.*"token":"\([^"]*\)".*/\1/p' >"$work/token"
say "token saved to $work/token"

step "Creating user alice, a developer: her sign-in token is printed once"
ALICE_TOKEN=$($wsync users create alice -o json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
say "alice signs in with $ALICE_TOKEN; she reaches her own workspaces only"
as_alice() { WSYNC_TOKEN=$ALICE_TOKEN "$@"; }

image=busybox:1.36
if [ "$node" = 1 ]; then
  step "Starting the agent; workspaces run on the local node ($(kubectl get nodes -o name))"
  # A workspace image without a registry: a page and a WebSocket echo on the IDE's port 8080,
  # and sshd on 60022, as a non-root user.
  hack/local-node.sh workspace-image
  image=localhost/workspace:3
else
  step "Starting the agent, and a kubelet stand-in (this cluster has no kubelet: it marks Pods Ready)"
  background target/debug/examples/kubelet_standin agent.gitlab.com/id=demo >"$work/kubelet.log" 2>&1
fi
background $wsync agent --agent-id demo --namespace wsync-system --control-plane-url "$WSYNC_SERVER" \
  --token-file "$work/token" >"$work/agent.log" 2>&1

wait_for() {
  local want=$1 name=${2:-alice}
  for _ in $(seq 1 120); do
    if $wsync workspaces get "$name" -o json 2>/dev/null | grep -q "\"actual_state\": \"$want\""; then return 0; fi
    sleep 1
  done
  echo "timed out waiting for $name to be $want; agent log:" >&2
  tail -20 "$work/agent.log" >&2
  return 1
}

step "alice creates workspace alice from a devfile (examples/devfile.yaml), as herself"
sed -n '/^schemaVersion/,$p' examples/devfile.yaml | sed 's/^/    /'
as_alice $wsync workspaces create alice --devfile examples/devfile.yaml
wait_for Running
as_alice $wsync workspaces get alice
echo
kubectl -n wsync-system get wss demo
echo
kubectl -n wsync-demo-alice get deployment,service,pvc,serviceaccount,configmap,networkpolicy
echo
kubectl -n wsync-demo-alice get pods -o wide

if [ "$node" = 1 ]; then
  step "alice opens it: port 8080 through the control plane and the agent's tunnel, nothing exposed"
  env WSYNC_TOKEN="$ALICE_TOKEN" $wsync workspaces port-forward alice 18481:8080 >"$work/port-forward.log" 2>&1 &
  forward=$!
  for _ in $(seq 1 50); do curl -fs http://127.0.0.1:18481/ >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fsS http://127.0.0.1:18481/
  kill "$forward" 2>/dev/null || true
  step "alice runs a command in it over ssh: the workspace's own sshd, through the same tunnel"
  as_alice $wsync workspaces ssh alice -l workspace -- -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=error 'echo "$USER on $(hostname): $(uname -sr); the devfile'"'"'s postStart wrote: $(cat /cache/greeting)"'
  say "in a browser: $(as_alice $wsync workspaces get alice -o json | sed -n 's/.*"url": "\(http[^"]*\)".*/\1/p' | head -1)"
fi

step "alice stops it: the agent scales it to 0 and reports it Stopped"
as_alice $wsync workspaces stop alice >/dev/null
wait_for Stopped
$wsync workspaces list

step "Terminating alice: the agent deletes its namespace and reports Terminating, then Terminated"
$wsync workspaces terminate alice >/dev/null
wait_for Terminated
$wsync workspaces list
if kubectl get namespace wsync-demo-alice >/dev/null 2>&1; then say "namespace wsync-demo-alice: still there"; else
  say "namespace wsync-demo-alice: gone"; fi
echo
kubectl -n wsync-system get wss demo

step "The audit trail: who did what, from where"
$wsync audit --limit 8

if [ "$keep" = 0 ]; then
  step "Done; stopping everything"
  exit 0
fi

step "alice creates workspace bob, and it is all left running (--keep)"
as_alice $wsync workspaces create bob --image "$image" --cpu 100m --memory 64Mi >/dev/null
wait_for Running bob
$wsync workspaces list
write_stop
finished=1
ssh_line=""
[ "$node" = 0 ] || ssh_line="                 ssh: $wsync workspaces ssh bob -l workspace (no password: the local node
                 enforces no NetworkPolicy, so anything on this machine can reach its sshd)
"
cat <<KEPT

   The page:     $WSYNC_SERVER/sign-in
                 alice (a user: her workspaces, her API tokens): $ALICE_TOKEN
                 the admin (every agent, the users, the audit trail): $WSYNC_ADMIN_TOKEN
   The CLI:      export WSYNC_SERVER=$WSYNC_SERVER WSYNC_TOKEN=$ALICE_TOKEN WSYNC_AGENT_ID=demo
                 $wsync workspaces list; $wsync workspaces stop bob
                 as the admin: export -n WSYNC_TOKEN; export WSYNC_ADMIN_TOKEN=$WSYNC_ADMIN_TOKEN
                 $wsync users list; $wsync audit
   Workspace:    $(as_alice $wsync workspaces get bob -o json | sed -n 's/.*"url": "\(http[^"]*\)".*/\1/p' | head -1)
                 (sign in as alice when asked; *.localhost is this machine)
                 with the CLI's exports: $wsync workspaces port-forward bob 8080
$ssh_line   The cluster:  eval "\$(hack/local-cluster.sh env)"
                 kubectl -n wsync-system get wss demo; kubectl -n wsync-demo-bob get all
                 PATH="\$PWD/target/debug:\$PATH" kubectl wsync workspaces demo
   Logs:         $work/agent.log, $work/control-plane.log
   Stop it all:  $work/stop.sh
KEPT
