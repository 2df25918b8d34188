#!/usr/bin/env bash
# A real node for the local cluster: containerd, runc and the CNI plugins from Debian, and a
# kubelet, kube-scheduler and kube-proxy built from the same Debian source as the apiserver.
#
#   hack/local-node.sh up      start the node against hack/local-cluster.sh's apiserver; wait for Ready
#   hack/local-node.sh down    stop only what up started, by PID, and remove the node's state
#   hack/local-node.sh status  exit 0 when the node is Ready
#   hack/local-node.sh allowed exit 0 when this machine can run a node (root, cgroup v1)
#   hack/local-node.sh import IMAGE.tar   import an image (hack/mkimage.py) into the node
#   hack/local-node.sh image [BINARY] [REF]  build the wsync image (default: target/release/wsync,
#                              localhost/wsync:dev) and import it
#   hack/local-node.sh workspace-image  build and import localhost/workspace:3, a workspace to
#                              open: a page, /big (32 MiB) and a WebSocket echo on 8080, sshd on 60022
#   hack/local-node.sh git-image  build and import localhost/git:1, the devfile projects' cloner
#   hack/local-node.sh pg-client-image  build and import localhost/pg-client:1 (pg_dump), for the
#                              control plane chart's backup CronJob
#
# Root only, cgroup v1, one node per machine. Images come by import, never from a registry:
# localhost/pause:1 and localhost/busybox:1 are built at up. The apiserver listens on 127.0.0.1;
# Pods reach it at https://10.250.250.1:16443, a forwarder on the node's address (the
# `kubernetes` Service names 127.0.0.1, which no Pod reaches: set KUBERNETES_SERVICE_HOST/PORT).
# kube-proxy routes other Services' ClusterIPs; no cluster DNS runs. The recipe and its limits:
# docs/ARCHITECTURE.md.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBE_VERSION=1.20.2
CACHE_DIR=${WSYNC_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wsync/kube-$KUBE_VERSION}
BIN=$CACHE_DIR/bin
CLUSTER=${WSYNC_CLUSTER_DIR:-${TMPDIR:-/tmp}/wsync-cluster}
STATE=${WSYNC_NODE_DIR:-${TMPDIR:-/tmp}/wsync-node}
NODE_IP=10.250.250.1
NODE_LINK=wsync-node0
CNI_BRIDGE=wsync-cni0
SOCKET=/run/containerd/containerd.sock
KUBECONFIG=$CLUSTER/admin.kubeconfig
APISERVER_PORT=${WSYNC_APISERVER_PORT:-16443}
export KUBECONFIG
SYSCTLS=(net.ipv4.ip_forward kernel.panic kernel.panic_on_oops vm.overcommit_memory)
# Paths kubelet and containerd use whatever their configuration says; removed at down only
# when up created them.
HOST_PATHS=(/run/containerd /var/log/pods /var/log/containers /var/lib/kubelet)

log() { printf '[local-node] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=hack/processes.sh
source hack/processes.sh  # the cwd is the repository (above)
node_ready() {
  [ "$(kubectl get node "$NODE_IP" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# Why this machine cannot run a node, if it cannot.
refusal() {
  if [ "$(id -u)" != 0 ]; then echo "a node needs root (containerd, network namespaces, cgroups)"
  elif [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then echo "kubelet 1.20 needs cgroup v1; this machine has cgroup v2 only"
  elif ! command -v apt-get >/dev/null; then echo "containerd and runc come from Debian's packages: no apt-get here"
  fi
}

check_machine() {
  local refused; refused=$(refusal)
  [ -z "$refused" ] || die "$refused"
  local free_kib; free_kib=$(df -Pk "$(dirname "$STATE")" | awk 'NR == 2 {print $4}')
  [ "${free_kib:-0}" -ge 1048576 ] \
    || die "only $((${free_kib:-0} / 1024)) MiB free under $(dirname "$STATE"): the kubelet taints its node with disk-pressure below 512 MiB and no workspace Pod would start; free some space"
  hack/local-cluster.sh status || die "no local apiserver: run hack/local-cluster.sh up first"
  openssl x509 -in "$CLUSTER/pki/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "$NODE_IP" \
    || die "the apiserver's certificate does not name $NODE_IP, where Pods reach it: a cluster from an older hack/local-cluster.sh; run hack/local-cluster.sh down, then up"
  local missing=()
  command -v websocketd >/dev/null || missing+=(websocketd)
  command -v ssh-keygen >/dev/null || missing+=(openssh-client)
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ -x /bin/busybox ] || missing+=(busybox-static)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v socat >/dev/null || missing+=(socat)
  command -v strip >/dev/null || missing+=(binutils)
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  apt_install "${missing[@]}"
  hack/local-cluster.sh build-node
}

apt_install() {
  [ $# -gt 0 ] || return 0
  log "installing: $*"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Debian's sshd for the workspace image, unpacked into the cache and never installed: no
# service, no host keys, nothing that starts at boot. Its libraries are installed (they start
# nothing). Prints the unpacked tree's root.
unpacked_sshd() {
  local root=$CACHE_DIR/openssh-server debs libs=() package
  if [ ! -x "$root/usr/sbin/sshd" ]; then
    debs=$(mktemp -d)
    (cd "$debs" && apt-get download -qq openssh-server 2>/dev/null) \
      || { apt-get update -qq && (cd "$debs" && apt-get download -qq openssh-server); }
    rm -rf "$root" && mkdir -p "$root"
    dpkg-deb -x "$debs"/openssh-server_*.deb "$root"
    for package in $(dpkg-deb -f "$debs"/openssh-server_*.deb Depends | tr ',' '\n' | sed -E 's/^ *//; s/[ |(].*//'); do
      case $package in lib*) dpkg -s "$package" >/dev/null 2>&1 || libs+=("$package") ;; esac
    done
    rm -rf "$debs"
    apt_install "${libs[@]}" >&2
  fi
  ! ldd "$root/usr/sbin/sshd" | grep -q 'not found' || die "sshd's libraries: $(ldd "$root/usr/sbin/sshd" | grep 'not found')"
  echo "$root"
}

write_configs() {
  mkdir -p "$STATE"/{logs,cni/net.d,cni/ipam,kubelet,containerd,images}
  cat >"$STATE/containerd.toml" <<TOML
version = 2
root = "$STATE/containerd"
state = "/run/containerd"
[grpc]
  address = "$SOCKET"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "localhost/pause:1"
    # Without CAP_SYS_RESOURCE (these VMs), no OOM score below containerd's own.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$STATE/cni/net.d"
TOML
  cat >"$STATE/cni/net.d/10-wsync.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "wsync-node", "plugins": [
  {"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
            "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
  # As a production kubelet: no anonymous request; a bearer token is checked by a TokenReview
  # and every request authorized by a SubjectAccessReview; the apiserver (logs, exec) presents
  # its client certificate of the cluster CA (hack/local-cluster.sh).
  cat >"$STATE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $CLUSTER/pki/ca.crt}}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# Absolute floors: a percentage of a large shared disk taints the node (disk-pressure) while
# gigabytes are still free, and every workspace Pod then stays Pending.
evictionHard: {memory.available: "100Mi", nodefs.available: "512Mi", imagefs.available: "512Mi"}
# No image GC: the images are built here and cannot be pulled again, and on 1.20 the kubelet
# does not pin the sandbox image (a full disk once removed localhost/pause:1 mid-run).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 10s
containerLogMaxSize: 1Mi
volumePluginDir: $STATE/kubelet/volume-plugins
YAML
}

build_images() {
  local dir=$STATE/images
  cat >"$dir/pause.c" <<'C'
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; exit(0); }
int main(void) {
  signal(SIGINT, stop);
  signal(SIGTERM, stop);
  for (;;) pause();
}
C
  gcc -Os -static -o "$dir/pause" "$dir/pause.c"
  python3 hack/mkimage.py "$dir/pause.tar" localhost/pause:1 --file "$dir/pause:pause" \
    --entrypoint '["/pause"]' --user 65535:65535
  local links=()
  mapfile -t links < <(busybox_links)
  python3 hack/mkimage.py "$dir/busybox.tar" localhost/busybox:1 --file /bin/busybox:bin/busybox \
    --cmd '["sh"]' "${links[@]}"
  import_image "$dir/pause.tar"
  import_image "$dir/busybox.tar"
}

# The wsync image, as the Dockerfile's runtime stage makes it: the binary (stripped), the shared
# libraries it links, the CA roots, user 65532; the Pod's securityContext makes the root read-only.
wsync_image() {
  local binary=${1:-target/release/wsync} ref=${2:-localhost/wsync:dev} dir files=()
  [ -x "$binary" ] || die "no wsync binary at $binary: cargo build --release"
  dir=$(mktemp -d)
  strip -o "$dir/wsync" "$binary"
  files+=("--file=$dir/wsync:usr/local/bin/wsync")
  mapfile -t -O "${#files[@]}" files < <(library_files "$binary")
  [ ! -f /etc/ssl/certs/ca-certificates.crt ] \
    || files+=("--file=/etc/ssl/certs/ca-certificates.crt:etc/ssl/certs/ca-certificates.crt:0644")
  python3 hack/mkimage.py "$dir/wsync.tar" "$ref" "${files[@]}" \
    --entrypoint '["/usr/local/bin/wsync"]' --cmd '["agent"]' --user 65532:65532
  import_image "$dir/wsync.tar"
  rm -rf "$dir"
  log "imported $ref ($binary)"
}

# A workspace to open, for the tests and the demo: busybox's tools; websocketd serving a page
# and echoing each WebSocket message (through cat) on the IDE's 8080; Debian's sshd on 60022
# as the image's own non-root user, who logs in with no password (README: "SSH" says when
# that is safe). Its host key is kept in the cache, the same from one build to the next.
workspace_image() {
  local sshd dir files=()
  command -v websocketd >/dev/null || apt_install websocketd
  command -v ssh-keygen >/dev/null || apt_install openssh-client
  sshd=$(unpacked_sshd)/usr/sbin/sshd
  mkdir -p "$CACHE_DIR"
  [ -f "$CACHE_DIR/workspace_host_key" ] || ssh-keygen -q -t ed25519 -N '' -C workspace -f "$CACHE_DIR/workspace_host_key"
  dir=$(mktemp -d)
  # shellcheck disable=SC2064 # the directory is known now
  trap "rm -rf '$dir'" EXIT
  printf '<!doctype html><title>wsync workspace</title><h1 id="page">Served from the workspace Pod</h1>\n' >"$dir/index.html"
  head -c 33554432 /dev/zero >"$dir/big"  # for the tunnel's throughput benchmark
  printf 'root:x:0:0:root:/root:/bin/sh\nworkspace::65532:65532:workspace:/tmp:/bin/sh\n' >"$dir/passwd"
  printf 'passwd: files\ngroup: files\n' >"$dir/nsswitch.conf"
  cat >"$dir/sshd_config" <<'SSHD'
Port 60022
HostKey /etc/ssh/host_key
PidFile none
UsePAM no
PasswordAuthentication yes
PermitEmptyPasswords yes
KbdInteractiveAuthentication no
StrictModes no
PrintMotd no
SSHD
  # Either server ending ends the container, so a broken one is seen, not left half-up.
  cat >"$dir/start" <<'START'
#!/bin/sh
trap 'exit 0' TERM
websocketd --port 8080 --staticdir /www /bin/cat &
/usr/sbin/sshd -D -e -f /etc/ssh/sshd_config &
wait -n
echo "a server of the workspace ended" >&2
exit 1
START
  files+=("--file=/bin/busybox:bin/busybox" "--file=$sshd:usr/sbin/sshd" "--file=$(command -v websocketd):bin/websocketd")
  mapfile -t -O "${#files[@]}" files < <(library_files "$sshd" "$(command -v websocketd)")
  files+=("--file=$dir/index.html:www/index.html:0644" "--file=$dir/big:www/big:0644" "--file=$dir/passwd:etc/passwd:0644"
    "--file=$dir/nsswitch.conf:etc/nsswitch.conf:0644" "--file=$dir/sshd_config:etc/ssh/sshd_config:0644"
    "--file=$CACHE_DIR/workspace_host_key:etc/ssh/host_key:0600:65532" "--file=$dir/start:start")
  mapfile -t -O "${#files[@]}" files < <(busybox_links)
  python3 hack/mkimage.py "$dir/workspace.tar" localhost/workspace:3 "${files[@]}" \
    --cmd '["/start"]' --user 65532:65532
  import_image "$dir/workspace.tar"
  log "imported localhost/workspace:3"
}

# The devfile projects' cloner (#40), for the tests and the demo: Debian's git and busybox's
# tools, as user 65532 (the control plane's --project-cloner-image).
git_image() {
  local dir files=()
  [ -x /usr/bin/git ] || apt_install git
  dir=$(mktemp -d)
  # shellcheck disable=SC2064 # the directory is known now
  trap "rm -rf '$dir'" EXIT
  printf 'root:x:0:0:root:/root:/bin/sh\ngit::65532:65532:git:/tmp:/bin/sh\n' >"$dir/passwd"
  files+=("--file=/bin/busybox:bin/busybox" "--file=/usr/bin/git:usr/bin/git" "--file=/usr/bin/git:usr/lib/git-core/git"
    "--file=$dir/passwd:etc/passwd:0644")
  mapfile -t -O "${#files[@]}" files < <(library_files /usr/bin/git)
  mapfile -t -O "${#files[@]}" files < <(busybox_links)
  python3 hack/mkimage.py "$dir/git.tar" localhost/git:1 "${files[@]}" --cmd '["git", "--version"]' --user 65532:65532
  import_image "$dir/git.tar"
  log "imported localhost/git:1"
}

# mkimage.py's --file for each shared library the binaries link, once each.
# PostgreSQL's client for the chart's backup CronJob (#41), in place of docker.io's postgres
# image: Debian's pg_dump, as the local server's, and busybox's tools, as user 65532.
pg_client_image() {
  local dir bin files=()
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$bin" ] && [ -x "$bin/pg_dump" ] || die "no pg_dump: hack/local-postgres.sh up installs PostgreSQL"
  dir=$(mktemp -d)
  # shellcheck disable=SC2064 # the directory is known now
  trap "rm -rf '$dir'" EXIT
  files+=("--file=/bin/busybox:bin/busybox" "--file=$bin/pg_dump:usr/bin/pg_dump")
  mapfile -t -O "${#files[@]}" files < <(library_files "$bin/pg_dump")
  mapfile -t -O "${#files[@]}" files < <(busybox_links)
  python3 hack/mkimage.py "$dir/pg-client.tar" localhost/pg-client:1 "${files[@]}" --cmd '["pg_dump", "--version"]' --user 65532:65532
  import_image "$dir/pg-client.tar"
  log "imported localhost/pg-client:1"
}

library_files() {
  local binary lib
  for binary in "$@"; do ldd "$binary"; done | grep -o '/[^ ]*' | sort -u | while read -r lib; do
    echo "--file=$(readlink -f "$lib"):$lib"
  done
}

# mkimage.py's --link for each of busybox's applets.
busybox_links() {
  local applet
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || echo "--link=/bin/busybox:bin/$applet"
  done
}

import_image() {
  ctr --address "$SOCKET" -n k8s.io images import "$1" >/dev/null
}

# The default StorageClass: the controller manager's hostPath provisioner makes a volume for
# each claim (a workspace's home), under /tmp/hostpath_pv, and deletes it with the claim.
make_storage_class() {
  kubectl apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: wsync-local-hostpath
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
  labels: {wsync.dev/local-node: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
YAML
}

up() {
  if pid_alive "$STATE/kubelet.pid" && node_ready; then log "already up: node $NODE_IP"; return; fi
  check_machine
  down_processes
  write_configs
  : >"$STATE/created"
  local path name
  for path in "${HOST_PATHS[@]}"; do [ -e "$path" ] || echo "$path" >>"$STATE/created"; done
  [ -f "$STATE/sysctl.saved" ] || for name in "${SYSCTLS[@]}"; do echo "$name=$(sysctl -n "$name")"; done >"$STATE/sysctl.saved"
  sysctl -qw net.ipv4.ip_forward=1

  containerd --config "$STATE/containerd.toml" >"$STATE/logs/containerd.log" 2>&1 &
  echo $! >"$STATE/containerd.pid"
  for _ in $(seq 1 50); do [ -S "$SOCKET" ] && break; sleep 0.2; done
  [ -S "$SOCKET" ] || die "containerd did not start (see $STATE/logs/containerd.log)"
  build_images

  ip link show "$NODE_LINK" >/dev/null 2>&1 || ip link add "$NODE_LINK" type bridge
  ip addr replace "$NODE_IP/32" dev "$NODE_LINK"
  ip link set "$NODE_LINK" up

  "$BIN/kubelet" --config="$STATE/kubelet.yaml" --kubeconfig="$KUBECONFIG" \
    --container-runtime=remote --container-runtime-endpoint="unix://$SOCKET" \
    --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
    --hostname-override="$NODE_IP" --node-ip="$NODE_IP" --v=1 >"$STATE/logs/kubelet.log" 2>&1 &
  echo $! >"$STATE/kubelet.pid"
  "$BIN/kube-scheduler" --kubeconfig="$KUBECONFIG" --authentication-kubeconfig="$KUBECONFIG" \
    --authorization-kubeconfig="$KUBECONFIG" --leader-elect=false --port=0 --secure-port=0 \
    >"$STATE/logs/kube-scheduler.log" 2>&1 &
  echo $! >"$STATE/scheduler.pid"
  # The node's own controllers: the not-ready taint lifted, claims bound, orphaned Pods removed,
  # Services' endpoints kept (kube-proxy reads the slices), Jobs run (no CronJob controller:
  # the tests start a CronJob's Job themselves, and a schedule must not add one meanwhile).
  "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" \
    --controllers=persistentvolume-binder,podgc,nodelifecycle,endpoint,endpointslice,job \
    --enable-taint-manager=false \
    --enable-hostpath-provisioner \
    --leader-elect=false --secure-port=0 --port=0 >"$STATE/logs/kube-controller-manager.log" 2>&1 &
  echo $! >"$STATE/kcm.pid"

  for _ in $(seq 1 90); do
    node_ready && break
    pid_alive "$STATE/kubelet.pid" || { tail -20 "$STATE/logs/kubelet.log" >&2; die "kubelet exited"; }
    sleep 1
  done
  node_ready || die "node $NODE_IP not Ready after 90s (see $STATE/logs)"
  # The apiserver, for Pods: TLS passes through; its certificate names $NODE_IP.
  socat "TCP-LISTEN:$APISERVER_PORT,bind=$NODE_IP,fork,reuseaddr" "TCP:127.0.0.1:$APISERVER_PORT" \
    >"$STATE/logs/apiserver-forwarder.log" 2>&1 &
  echo $! >"$STATE/forwarder.pid"
  # Services' ClusterIPs, for Pods and for this host (iptables mode). --masquerade-all: two Pods
  # on the bridge then answer each other through the host, without br_netfilter; conntrack's
  # limits are left as they are (a container may not set them). No cluster DNS runs: Pods name
  # a Service by its ClusterIP.
  "$BIN/kube-proxy" --kubeconfig="$KUBECONFIG" --hostname-override="$NODE_IP" --proxy-mode=iptables \
    --masquerade-all --cluster-cidr=10.244.0.0/24 --conntrack-max-per-core=0 \
    --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
    >"$STATE/logs/kube-proxy.log" 2>&1 &
  echo $! >"$STATE/proxy.pid"
  make_storage_class
  log "ready: node $NODE_IP (images localhost/pause:1, localhost/busybox:1)"
}

down_processes() {
  stop_pid "$STATE/forwarder.pid"
  if pid_alive "$STATE/proxy.pid"; then
    stop_pid "$STATE/proxy.pid"
    # Its iptables chains go with it; --cleanup leaves its canaries and mark chains.
    "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
    local table chain
    for table in nat filter mangle; do
      for chain in KUBE-PROXY-CANARY KUBE-MARK-DROP KUBE-MARK-MASQ; do
        iptables -t "$table" -F "$chain" 2>/dev/null && iptables -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  fi
  stop_pid "$STATE/scheduler.pid"
  if pid_alive "$STATE/kubelet.pid"; then
    # The kubelet tears its Pods down (CNI DEL included) before it stops.
    kubectl delete pods -A --field-selector "spec.nodeName=$NODE_IP" --force --grace-period=0 >/dev/null 2>&1 || true
    for _ in $(seq 1 30); do
      [ -z "$(ctr --address "$SOCKET" -n k8s.io tasks ls -q 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  stop_pid "$STATE/kcm.pid"
  stop_pid "$STATE/kubelet.pid"
  stop_pid "$STATE/containerd.pid"
  pkill -f "containerd-shim-runc-v2 -namespace k8s.io" 2>/dev/null || true
}

down() {
  kubectl delete node "$NODE_IP" --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete storageclass -l wsync.dev/local-node=true --ignore-not-found >/dev/null 2>&1 || true
  down_processes
  local mount
  for mount in $(awk '{print $2}' /proc/mounts | grep -E "^($STATE|/run/containerd)" | sort -r); do
    umount -l "$mount" 2>/dev/null || true
  done
  ip netns list 2>/dev/null | awk '/^cni-/{print $1}' | xargs -r -n1 ip netns del 2>/dev/null || true
  ip link del "$CNI_BRIDGE" 2>/dev/null || true
  ip link del "$NODE_LINK" 2>/dev/null || true
  if [ -f "$STATE/sysctl.saved" ]; then
    local line; while read -r line; do sysctl -qw "$line" || true; done <"$STATE/sysctl.saved"
  fi
  if [ -f "$STATE/created" ]; then
    local path; while read -r path; do rm -rf "$path"; done <"$STATE/created"
  fi
  rm -rf "$STATE"
  log "stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) node_ready ;;
  allowed) refused=$(refusal); [ -z "$refused" ] || { log "$refused"; exit 1; } ;;
  image) wsync_image "${2:-}" "${3:-}" ;;
  workspace-image) workspace_image ;;
  git-image) git_image ;;
  pg-client-image) pg_client_image ;;
  import) import_image "${2:?an image tarball}" ;;
  *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
