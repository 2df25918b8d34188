#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1, built from Debian's own packages.
#
#   hack/local-cluster.sh build   build etcd, kube-apiserver and kube-controller-manager once (cached);
#                                 with WSYNC_NODE=1 also the node's binaries
#   hack/local-cluster.sh build-node  build kubelet, kube-scheduler and kube-proxy once (hack/local-node.sh)
#   hack/local-cluster.sh up      build if needed, then start them; idempotent
#   hack/local-cluster.sh down    stop them and wipe the state
#   hack/local-cluster.sh restart stop and start them, keeping the state (the fault suite)
#   hack/local-cluster.sh status  exit 0 when the apiserver answers
#   hack/local-cluster.sh env     print the exports that point tools at it
#
# There is no scheduler and no kubelet: Pods stay Pending unless a test-side kubelet stand-in
# marks them Running (tests/support). DESIGN.md §4 explains every flag and build quirk below.
set -euo pipefail

KUBE_VERSION=1.20.2
CACHE_DIR=${WSYNC_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wsync/kube-$KUBE_VERSION}
STATE_DIR=${WSYNC_CLUSTER_DIR:-${TMPDIR:-/tmp}/wsync-cluster}
APISERVER_PORT=${WSYNC_APISERVER_PORT:-16443}
ETCD_PORT=${WSYNC_ETCD_PORT:-12379}
BIN=$CACHE_DIR/bin

# Tokens are fixed: the cluster is loopback-only and throw-away.
ADMIN_TOKEN=wsync-admin-token
AGENT_TOKEN=wsync-agent-token

log() { printf '[local-cluster] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=hack/processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/processes.sh"

built() { [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/etcd" ]; }

# apt against a private sources dir derived from the machine's own mirror; /etc/apt is untouched.
private_apt() {
  local dir=$1; shift
  apt-get -q -o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$dir/sources" \
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" \
    -o APT::Sandbox::User=root "$@"
}

prepare_private_apt() {
  local dir=$1 f found=0
  mkdir -p "$dir/sources" "$dir/lists/partial" "$dir/cache/archives/partial"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # Only the Debian archive: third-party repos carry no source for what we need.
    grep -q 'debian' "$f" || continue
    sed -e 's/^Types:.*$/Types: deb deb-src/' "$f" >"$dir/sources/$(basename "$f")"
    found=1
  done
  if [ -f /etc/apt/sources.list ]; then
    grep -E '^deb ' /etc/apt/sources.list | grep debian | sed -e 'p;s/^deb /deb-src /' \
      >"$dir/sources/from-sources-list.list" || true
    [ -s "$dir/sources/from-sources-list.list" ] && found=1
  fi
  [ "$found" = 1 ] || die "no Debian apt source configured on this machine"
  private_apt "$dir" update >/dev/null
}

# Fetch Debian's kubernetes source and Go toolchain into $work, unpack, and cd into the tree
# with GOPATH mode set up; LDFLAGS stamps the version.
prepare_tree() {
  command -v apt-get >/dev/null || die "apt-get is needed to fetch Debian's packages"
  work=$CACHE_DIR/work
  rm -rf "$work"; mkdir -p "$work/dl" "$work/root" "$BIN"
  log "fetching Debian sources and toolchain into $work"
  prepare_private_apt "$work/apt"
  (cd "$work/dl" && private_apt "$work/apt" source --download-only kubernetes >/dev/null \
    && private_apt "$work/apt" download golang-1.19-go golang-1.19-src etcd-server \
      golang-github-modern-go-reflect2-dev >/dev/null)
  local deb; for deb in "$work"/dl/*.deb; do dpkg-deb -x "$deb" "$work/root"; done

  log "unpacking kubernetes $KUBE_VERSION"
  tar -C "$work" -xzf "$work"/dl/kubernetes_*.orig.tar.gz
  export GOROOT=$work/root/usr/lib/go-1.19 GOPATH=$work/gopath GOCACHE=$work/gocache
  export GO111MODULE=off GOFLAGS= CGO_ENABLED=0 PATH=$GOROOT/bin:$PATH
  k8s=$GOPATH/src/k8s.io/kubernetes
  mkdir -p "$(dirname "$k8s")"; ln -sfn "$work/kubernetes-$KUBE_VERSION" "$k8s"

  # Quirk 3: vendored reflect2 1.0.1 crashes under Go >= 1.18; Debian ships 1.0.2.
  rm -rf "$k8s/vendor/github.com/modern-go/reflect2"
  cp -r "$work/root/usr/share/gocode/src/github.com/modern-go/reflect2" "$k8s/vendor/github.com/modern-go/reflect2"

  # Quirk 4: without these, /version reads v0.0.0.
  LDFLAGS="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS+=" -X k8s.io/kubernetes/vendor/$pkg.gitVersion=v$KUBE_VERSION"
    LDFLAGS+=" -X k8s.io/kubernetes/vendor/$pkg.gitMajor=1 -X k8s.io/kubernetes/vendor/$pkg.gitMinor=20"
  done
  cd "$k8s"
}

go_build() {
  local cmd
  for cmd in "$@"; do
    log "building $cmd (a few minutes on 2 cores)"
    go build -ldflags "$LDFLAGS" -o "$BIN/$cmd.tmp" "./cmd/$cmd"
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  done
}

build() {
  if built; then log "using cached binaries in $BIN"; return; fi
  local started=$SECONDS work k8s
  prepare_tree
  cp "$work/root/usr/bin/etcd" "$BIN/etcd"
  # Quirk 2: pkg/generated/openapi is generated at build time.
  log "generating openapi definitions"
  go build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  local dirs
  # -R: vendor/k8s.io/* are symlinks into staging/.
  dirs=$(grep -Rl --include='*.go' '+k8s:openapi-gen=' pkg vendor/k8s.io \
    | xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
  "$work/openapi-gen" --input-dirs "$dirs" --output-package k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi --go-header-file hack/boilerplate/boilerplate.generatego.txt \
    --report-filename "$work/openapi-report.txt" >/dev/null 2>&1 \
    || die "openapi-gen failed"
  go_build kube-apiserver kube-controller-manager
  # The node's binaries share this tree and its Go cache: minutes cheaper than apart.
  [ "${WSYNC_NODE:-}" != 1 ] || node_built || go_build $(node_missing)
  cd /
  "$BIN/kube-apiserver" --version
  [ -n "${WSYNC_KEEP_BUILD_DIR:-}" ] || rm -rf "$work"
  log "built in $((SECONDS - started))s into $BIN"
}

# The node's binaries (hack/local-node.sh): kube-proxy routes Services' ClusterIPs.
NODE_BINARIES=(kubelet kube-scheduler kube-proxy)
node_missing() { local cmd; for cmd in "${NODE_BINARIES[@]}"; do [ -x "$BIN/$cmd" ] || echo "$cmd"; done; }
node_built() { [ -z "$(node_missing)" ]; }

# The node's binaries, from the same tree; none needs the generated openapi.
build_node() {
  if node_built; then log "using cached ${NODE_BINARIES[*]} in $BIN"; return; fi
  local started=$SECONDS work k8s missing
  missing=$(node_missing)
  prepare_tree
  # shellcheck disable=SC2086 # one word per binary
  go_build $missing
  cd /
  [ -n "${WSYNC_KEEP_BUILD_DIR:-}" ] || rm -rf "$work"
  log "built" $missing "in $((SECONDS - started))s into $BIN"
}

apiserver_ready() {
  curl -fsS --max-time 2 --cacert "$STATE_DIR/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1
}

wait_port_free() {
  local port=$1 i
  for i in $(seq 1 50); do
    (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null || return 0
    sleep 0.2
  done
  die "port $port is still in use"
}

# The apiserver's client certificate to kubelets (logs, exec): a kubelet that refuses anonymous
# requests authenticates it by the cluster CA, and its webhook authorizes system:masters.
make_kubelet_client_cert() {
  local pki=$STATE_DIR/pki
  [ -f "$pki/kubelet-client.crt" ] && return
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
    -keyout "$pki/kubelet-client.key" -out "$pki/kubelet-client.csr" 2>/dev/null
  openssl x509 -req -in "$pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -out "$pki/kubelet-client.crt" 2>/dev/null
}

make_pki() {
  local pki=$STATE_DIR/pki
  [ -f "$pki/apiserver.crt" ] && return
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=wsync-local-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  # 10.250.250.1: hack/local-node.sh's node, where its Pods reach this apiserver.
  printf 'subjectAltName=IP:127.0.0.1,IP:10.250.250.1,DNS:localhost,DNS:kubernetes.default.svc\n' >"$pki/san.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  make_kubelet_client_cert
}

write_configs() {
  # The agent's tests use their own token, so the audit log can tell their writes apart.
  cat >"$STATE_DIR/tokens.csv" <<EOF
$ADMIN_TOKEN,admin,admin,system:masters
$AGENT_TOKEN,wsync-agent,wsync-agent,system:masters
EOF
  cat >"$STATE_DIR/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  # Every read of a Secret too: the hostile control-plane suite shows the agent reads none
  # but its allowed pull-secret sources.
  - level: Metadata
    resources: [{group: "", resources: ["secrets"]}]
  - level: None
EOF
  local user token
  for user in admin agent; do
    token=$ADMIN_TOKEN; [ "$user" = agent ] && token=$AGENT_TOKEN
    cat >"$STATE_DIR/$user.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: wsync-local
    cluster:
      server: https://127.0.0.1:$APISERVER_PORT
      certificate-authority: $STATE_DIR/pki/ca.crt
users:
  - name: $user
    user:
      token: $token
contexts:
  - name: wsync-local
    context: {cluster: wsync-local, user: $user}
current-context: wsync-local
EOF
  done
}

up() {
  build
  mkdir -p "$STATE_DIR/logs"
  if pid_alive "$STATE_DIR/apiserver.pid" && apiserver_ready; then
    log "already running on https://127.0.0.1:$APISERVER_PORT"
    start_controller_manager
    return
  fi
  down_processes
  make_pki
  write_configs

  wait_port_free "$ETCD_PORT"
  "$BIN/etcd" --data-dir "$STATE_DIR/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "default=http://127.0.0.1:$((ETCD_PORT + 1))" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 \
    >"$STATE_DIR/logs/etcd.log" 2>&1 &
  echo $! >"$STATE_DIR/etcd.pid"

  wait_port_free "$APISERVER_PORT"
  local pki=$STATE_DIR/pki
  make_kubelet_client_cert
  "$BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --token-auth-file="$STATE_DIR/tokens.csv" \
    --kubelet-client-certificate="$pki/kubelet-client.crt" --kubelet-client-key="$pki/kubelet-client.key" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --enable-priority-and-fairness=false \
    --audit-policy-file="$STATE_DIR/audit-policy.yaml" --audit-log-path="$STATE_DIR/logs/audit.log" \
    --audit-log-maxsize=1024 \
    >"$STATE_DIR/logs/kube-apiserver.log" 2>&1 &
  echo $! >"$STATE_DIR/apiserver.pid"

  local i
  for i in $(seq 1 120); do
    apiserver_ready && break
    pid_alive "$STATE_DIR/apiserver.pid" || { tail -20 "$STATE_DIR/logs/kube-apiserver.log" >&2; die "kube-apiserver exited"; }
    sleep 0.5
  done
  apiserver_ready || die "kube-apiserver not ready after 60s (see $STATE_DIR/logs)"
  start_controller_manager
  log "ready: export KUBECONFIG=$STATE_DIR/admin.kubeconfig"
}

# resourcequota keeps quotas' usage, which ResourceQuota admission needs to refuse a Pod.
# The default client rate (20 QPS) needs minutes to write the status of the benchmark's 10,000
# Deployments and to delete its namespaces; a real cluster's controllers keep up far better.
start_controller_manager() {
  pid_alive "$STATE_DIR/kcm.pid" && return
  local pki=$STATE_DIR/pki
  "$BIN/kube-controller-manager" --kubeconfig="$STATE_DIR/admin.kubeconfig" \
    --controllers=namespace,garbagecollector,deployment,replicaset,serviceaccount,serviceaccount-token,pvc-protection,pv-protection,resourcequota \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --leader-elect=false --secure-port=0 --port=0 \
    --kube-api-qps=300 --kube-api-burst=600 --concurrent-deployment-syncs=10 --concurrent-namespace-syncs=20 \
    >"$STATE_DIR/logs/kube-controller-manager.log" 2>&1 &
  echo $! >"$STATE_DIR/kcm.pid"
}

down_processes() {
  stop_pid "$STATE_DIR/kcm.pid"
  stop_pid "$STATE_DIR/apiserver.pid"
  stop_pid "$STATE_DIR/etcd.pid"
}

down() {
  down_processes
  rm -rf "$STATE_DIR"
  log "stopped"
}

print_env() {
  cat <<EOF
export KUBECONFIG=$STATE_DIR/admin.kubeconfig
export WSYNC_TEST_KUBECONFIG=$STATE_DIR/admin.kubeconfig
export WSYNC_TEST_AGENT_KUBECONFIG=$STATE_DIR/agent.kubeconfig
export WSYNC_TEST_AUDIT_LOG=$STATE_DIR/logs/audit.log
EOF
}

case "${1:-}" in
  build) build ;;
  build-node) build_node ;;
  up) up ;;
  down) down ;;
  restart) down_processes; up ;;
  status) apiserver_ready ;;
  env) print_env ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
